"""Another local user cannot call `air-mcp --transport http`: a token always, and a uid check."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
PING = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


@pytest.fixture
def open_home() -> Iterator[Path]:
    """An AIR_HOME whose parents another user may traverse, so file modes alone protect it."""
    base = Path(tempfile.mkdtemp(prefix="air-auth-"))
    base.chmod(0o755)
    yield base / "home"
    subprocess.run(["rm", "-rf", str(base)], check=False)


def as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NOBODY, *argv], capture_output=True, text=True, timeout=60)


def curl_as_nobody(url: str, token: str | None) -> int:
    """The HTTP status a ping gets when uid 65534 sends it."""
    headers = ["-H", "Accept: application/json, text/event-stream"]
    headers += ["-H", "Content-Type: application/json"]
    if token:
        headers += ["-H", f"Authorization: Bearer {token}"]
    done = as_nobody(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *headers, "-d", PING, url]
    )
    return int(done.stdout)


async def test_http_without_air_mcp_token_requires_the_generated_token(
    spawn_air_mcp: Callable[..., Any], open_home: Path
) -> None:
    sp = spawn_air_mcp(
        ["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=None, AIR_HOME=str(open_home)
    )
    url = sp.url()
    path = open_home / "mcp-token"
    token = path.read_text().strip()
    assert len(token) >= 32
    assert str(path) in sp.stderr and token not in sp.stderr  # where it is, never what it is
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    async with httpx2.AsyncClient(timeout=30) as http:
        bare = await http.post(
            url,
            content=PING,
            headers={
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
        )
    assert bare.status_code == 401  # loopback is not single-user: no token, no call
    assert curl_as_nobody(url, None) == 401

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with McpClient(streamable_http_client(url, http_client=http)) as mcp:
        assert "launch_job" in [t.name for t in (await mcp.list_tools()).tools]

    # Another user can walk to AIR_HOME but cannot read the token in it.
    (open_home / "readable").write_text("x")
    (open_home / "readable").chmod(0o644)
    open_home.chmod(0o755)
    assert as_nobody(["cat", str(open_home / "readable")]).returncode == 0
    denied = as_nobody(["cat", str(path)])
    assert denied.returncode != 0 and token not in denied.stdout

    sp.stop()  # the next start reuses the token, so configured clients keep working
    again = spawn_air_mcp(
        ["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=None, AIR_HOME=str(open_home)
    )
    again.url()
    assert path.read_text().strip() == token


async def test_a_world_readable_token_file_is_replaced(
    spawn_air_mcp: Callable[..., Any], open_home: Path
) -> None:
    open_home.mkdir(parents=True)
    leaked = open_home / "mcp-token"
    leaked.write_text("known-to-everyone\n")
    leaked.chmod(0o644)
    sp = spawn_air_mcp(
        ["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=None, AIR_HOME=str(open_home)
    )
    url = sp.url()
    assert leaked.read_text().strip() != "known-to-everyone"
    assert stat.S_IMODE(leaked.stat().st_mode) == 0o600
    async with httpx2.AsyncClient(timeout=30) as http:
        old = await http.post(
            url, content=PING, headers={"Authorization": "Bearer known-to-everyone"}
        )
    assert old.status_code == 401


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
async def test_another_local_user_is_refused_even_with_the_token(
    spawn_air_mcp: Callable[..., Any], open_home: Path
) -> None:
    token = "air-shared-by-mistake-" + "x" * 20
    sp = spawn_air_mcp(
        ["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=token, AIR_HOME=str(open_home)
    )
    url = sp.url()
    assert curl_as_nobody(url, token) == 403  # the peer's uid, read from the kernel's socket table
    async with httpx2.AsyncClient(timeout=30) as http:
        mine = await http.post(
            url,
            content=PING,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
        )
    assert mine.status_code not in (401, 403, 421)


async def test_mcp_config_writes_the_token_for_an_http_server(
    spawn_air_mcp: Callable[..., Any],
    open_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from air_skills.integrations.mcp_config import mcp_config

    sp = spawn_air_mcp(
        ["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=None, AIR_HOME=str(open_home)
    )
    url = sp.url()
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("AIR_HOME", str(open_home))
    monkeypatch.delenv("AIR_MCP_TOKEN", raising=False)
    result = mcp_config("cursor", write=True, http_url=url)
    written = Path(result["written"])
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    entry = json.loads(written.read_text())["mcpServers"]["air"]
    assert entry["url"] == url
    token = (open_home / "mcp-token").read_text().strip()
    assert entry["headers"] == {"Authorization": f"Bearer {token}"}

    http = httpx2.AsyncClient(headers=entry["headers"], timeout=60)  # as the client would
    async with McpClient(streamable_http_client(entry["url"], http_client=http)) as mcp:
        assert "cancel_job" in [t.name for t in (await mcp.list_tools()).tools]
    command = mcp_config("claude-code", http_url=url)["text"]
    assert "--transport http" in command and token not in command  # never on argv (issue 30)
    assert "'Authorization: Bearer ${AIR_MCP_TOKEN}'" in command
