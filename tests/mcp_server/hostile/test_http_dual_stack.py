"""Issue 30: a dual-stack server (`--host ::`) checks the uid of its IPv4 callers too."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytestmark = pytest.mark.anyio
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
PING = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def open_home() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="air-dual-"))
    base.chmod(0o755)
    yield base / "home"
    subprocess.run(["rm", "-rf", str(base)], check=False)


def _dual_stack() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::", 0))
        return True
    except OSError:
        return False


def test_a_mapped_ipv4_address_is_the_ipv4_address() -> None:
    from mcp_server.auth import unmapped
    from mcp_server.http import is_loopback

    assert unmapped("::ffff:127.0.0.1") == "127.0.0.1"
    assert unmapped("[::ffff:127.0.0.1]") == "127.0.0.1"
    assert unmapped("::1") == "::1" and unmapped("localhost") == "localhost"
    assert is_loopback("::ffff:127.0.0.1") and not is_loopback("::ffff:10.0.0.1")


def test_a_loopback_peer_the_kernel_does_not_name_is_refused() -> None:
    from mcp_server.http import _peer_refusal

    # A connection that is not in the kernel's table (gone, or never there): unknown uid.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
    scope = {"client": ("::ffff:127.0.0.1", 1), "server": ("::ffff:127.0.0.1", port)}
    refusal = _peer_refusal(scope)
    assert refusal is not None and "uid" in refusal
    remote = {"client": ("192.0.2.7", 5000), "server": ("192.0.2.1", port)}
    assert _peer_refusal(remote) is None  # a remote caller: the token is its check


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
@pytest.mark.skipif(not _dual_stack(), reason="no dual-stack IPv6 socket here")
async def test_an_ipv4_caller_of_a_dual_stack_server_is_checked_by_uid(
    spawn_air_mcp: Callable[..., Any], open_home: Path
) -> None:
    token = "air-shared-by-mistake-" + "y" * 20
    sp = spawn_air_mcp(
        ["--transport", "http", "--host", "::", "--port", "0"],
        AIR_MCP_TOKEN=token,
        AIR_HOME=str(open_home),
    )
    port = int(re.search(r":(\d+)/mcp", sp.url()).group(1))  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/mcp"  # IPv4, seen by the server as ::ffff:127.0.0.1
    curl = [*NOBODY, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"]
    curl += [x for k, v in HEADERS.items() for x in ("-H", f"{k}: {v}")]
    curl += ["-H", f"Authorization: Bearer {token}", "-d", PING, url]
    done = subprocess.run(curl, capture_output=True, text=True, timeout=60)
    assert done.stdout == "403", (done.stdout, done.stderr, sp.stderr)
    async with httpx2.AsyncClient(timeout=30) as http:
        mine = await http.post(
            url, content=PING, headers={**HEADERS, "Authorization": f"Bearer {token}"}
        )
    assert mine.status_code not in (401, 403, 421), mine.text
