"""Idle MCP HTTP sessions are bounded: a cap on open sessions, and idle ones expire."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from helpers import wait_until

pytestmark = pytest.mark.anyio
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "idle-client", "version": "1"},
    },
}


def headers(token: str, session: str | None = None) -> dict[str, str]:
    out = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    if session:
        out["Mcp-Session-Id"] = session
    return out


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_sessions_beyond_the_cap_are_refused_and_idle_ones_expire(
    spawn_air_mcp: Callable[..., Any],
) -> None:
    token = secrets.token_urlsafe(24)
    sp = spawn_air_mcp(
        ["--transport", "http", "--port", "0", "--max-sessions", "3", "--session-idle-s", "2"],
        AIR_MCP_TOKEN=token,
    )
    url = sp.url()
    async with httpx2.AsyncClient(timeout=30) as http:
        opened = []
        for _ in range(3):
            reply = await http.post(url, json=INITIALIZE, headers=headers(token))
            assert reply.status_code == 200
            opened.append(reply.headers["mcp-session-id"])
        beyond = await http.post(url, json=INITIALIZE, headers=headers(token))
        assert beyond.status_code == 503 and "Too many open sessions" in beyond.text
        await anyio.sleep(4)  # all three are idle past --session-idle-s
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        expired = await http.post(url, json=ping, headers=headers(token, opened[0]))
        assert expired.status_code == 404  # the client initializes again
        fresh = await http.post(url, json=INITIALIZE, headers=headers(token))
        assert fresh.status_code == 200


async def test_thousands_of_initialize_calls_keep_memory_bounded(
    spawn_air_mcp: Callable[..., Any],
) -> None:
    token = secrets.token_urlsafe(24)
    sp = spawn_air_mcp(["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=token)
    url = sp.url()
    # The server imports MLflow aside after it starts (issue 24): ~100 MB that are not sessions.
    wait_until(lambda: "MLflow ready" in sp.stderr, timeout_s=120)
    refused = 0
    async with httpx2.AsyncClient(timeout=30) as http:
        for _ in range(100):  # warm up: imports, caches, the first sessions
            await http.post(url, json=INITIALIZE, headers=headers(token))
        before = rss_kb(sp.proc.pid)
        for _ in range(1500):
            reply = await http.post(url, json=INITIALIZE, headers=headers(token))
            refused += reply.status_code == 503
    grown_mb = (rss_kb(sp.proc.pid) - before) / 1024
    assert refused > 1000  # the default cap holds: the sessions opened are few
    assert grown_mb < 20, f"RSS grew {grown_mb:.1f} MB over 1500 initialize calls"
