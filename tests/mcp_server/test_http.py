"""`air-mcp --transport http` as a real process: the SDK client, and the guard's refusals."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from helpers import wait_until
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

PY = sys.executable
pytestmark = pytest.mark.anyio
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def token() -> str:
    return "air-" + secrets.token_urlsafe(24)


@pytest.fixture
def http_server(spawn_air_mcp: Callable[..., Any], token: str) -> Any:
    """air-mcp on a free loopback port, logging at DEBUG (so the leak check means something)."""
    sp = spawn_air_mcp(
        ["--transport", "http", "--port", "0", "--log-level", "DEBUG"], AIR_MCP_TOKEN=token
    )
    sp.url()
    return sp


def mcp_over_http(url: str, token: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return McpClient(streamable_http_client(url, http_client=http))


async def test_sdk_client_over_http_with_the_token(http_server: Any, token: str) -> None:
    url = http_server.url()
    assert url.startswith("http://127.0.0.1:")
    async with mcp_over_http(url, token) as mcp:
        names = [t.name for t in (await mcp.list_tools()).tools]
        assert "launch_job" in names and "wait_for_jobs" in names
        launched = await mcp.call_tool(
            "launch_job", {"command": [PY, "-c", "print('over http')"], "track": False}
        )
        job_id = launched.structured_content["job_id"]
        progress: list[float] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(done)

        waited = await mcp.call_tool(
            "wait_for_jobs", {"job_ids": [job_id], "timeout_s": 60}, progress_callback=on_progress
        )
        assert waited.structured_content["jobs"][0]["status"] == "SUCCEEDED"
        assert progress and progress[-1] == 1
        logs = await mcp.call_tool("get_logs", {"job_id": job_id})
        assert logs.structured_content["text"] == "over http\n"
        refused = await mcp.call_tool("cancel_job", {"job_id": job_id})
        assert refused.is_error and refused.content[0].text.startswith("[invalid-state]")  # type: ignore[union-attr]
    assert token not in http_server.stderr


async def post(url: str, headers: dict[str, str], body: Any = PING) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        if isinstance(body, bytes):
            return await http.post(url, content=body, headers={**ACCEPT, **headers})
        return await http.post(url, json=body, headers={**ACCEPT, **headers})


async def test_guard_refusals(http_server: Any, token: str) -> None:
    url = http_server.url()
    port = url.split(":")[2].split("/")[0]
    auth = {"Authorization": f"Bearer {token}"}
    replies = []

    missing = await post(url, {})
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith('Bearer realm="air-mcp"')
    wrong = await post(url, {"Authorization": f"Bearer {token}x"})
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
    basic = await post(url, {"Authorization": f"Basic {token}"})
    assert basic.status_code == 401
    replies += [missing, wrong, basic]

    foreign_origin = await post(url, {**auth, "Origin": "http://evil.example"})
    assert foreign_origin.status_code == 403
    null_origin = await post(url, {**auth, "Origin": "null"})
    assert null_origin.status_code == 403
    foreign_host = await post(url, {**auth, "Host": f"evil.example:{port}"})
    assert foreign_host.status_code == 421
    rebound = await post(url, {**auth, "Host": "127.0.0.1:1"})  # another port is another host
    assert rebound.status_code == 421
    replies += [foreign_origin, null_origin, foreign_host, rebound]

    huge = await post(url, auth, b'{"x": "' + b"x" * 2_000_000 + b'"}')
    assert huge.status_code == 413

    async def chunks():  # no Content-Length: the size is counted as it streams
        for _ in range(40):
            yield b"x" * 50_000

    async with httpx2.AsyncClient(timeout=30) as http:
        streamed = await http.post(url, content=chunks(), headers={**ACCEPT, **auth})
    assert streamed.status_code == 413
    replies += [huge, streamed]

    local_origin = await post(url, {**auth, "Origin": "http://localhost:6274"})
    assert local_origin.status_code not in (401, 403, 421)
    fine = await post(url, {**auth, "Host": f"localhost:{port}"})
    assert fine.status_code not in (401, 403, 421)

    for reply in replies:  # the token is never echoed, in a body or a header
        assert token not in reply.text and token not in str(reply.headers)
    assert token not in http_server.stderr


def test_refuses_to_listen_beyond_loopback_without_a_token(
    spawn_air_mcp: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    sp = spawn_air_mcp(
        ["--transport", "http", "--host", "0.0.0.0", "--port", "0"], AIR_MCP_TOKEN=None
    )
    assert sp.proc.wait(timeout=60) == 2
    wait_until(lambda: "refusing to listen on 0.0.0.0" in sp.stderr, timeout_s=10)
    assert "AIR_MCP_TOKEN" in sp.stderr
    from mcp_server.server import main

    monkeypatch.delenv("AIR_MCP_TOKEN", raising=False)
    for host in ("::", "192.0.2.10", "example.com"):
        assert main(["--transport", "http", "--host", host, "--port", "0"]) == 2
        assert f"refusing to listen on {host}" in capsys.readouterr().err
