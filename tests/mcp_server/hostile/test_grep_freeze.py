"""Issue 30: one grep cannot freeze air-mcp: RE2 answers a catastrophic pattern, and other
calls answer beside a grep."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from air_skills import Client, JobSpec, JobStatus

PY = sys.executable
pytestmark = pytest.mark.anyio
EVIL = "(a+)+$"
# A fence against a hang, not a speed check: the old engine took hours on these lines.
FENCE_S = 60


async def test_a_catastrophic_grep_answers_and_list_gpus_answers_beside_it(
    spawn_air_mcp: Callable[..., Any], client: Client
) -> None:
    code = "[print('a' * 40 + 'b') for _ in range(2000)]; print('aaa')"
    info = client.launch(JobSpec(command=[PY, "-c", code], track=False))
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    token = "air-" + secrets.token_urlsafe(24)
    url = spawn_air_mcp(["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=token).url()
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=FENCE_S)
    replies: dict[str, Any] = {}
    async with McpClient(streamable_http_client(url, http_client=http)) as mcp:

        async def call(name: str, args: dict[str, Any]) -> None:
            replies[name] = await mcp.call_tool(name, args)

        with anyio.fail_after(FENCE_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "get_logs", {"job_id": info.job_id, "grep": EVIL})
                tg.start_soon(call, "list_gpus", {})
        bad = await mcp.call_tool("get_logs", {"job_id": info.job_id, "grep": r"(a)\1"})
    grep = replies["get_logs"].structured_content
    assert grep["total_matches"] == 1 and grep["matches"][0]["line"] == 2001, grep
    assert not replies["list_gpus"].is_error
    assert bad.is_error and bad.content[0].text.startswith("[invalid-pattern]")  # type: ignore[union-attr]
