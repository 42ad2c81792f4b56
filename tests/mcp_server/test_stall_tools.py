"""Stall detection over MCP: launch_job(stall_timeout_min=), and get_job / wait_for_jobs say
that a job stalled, where it was, and why it failed."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from mcp import Client as McpClient

pytestmark = pytest.mark.anyio
PY = sys.executable
SILENT = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(0.05)\n"


async def ok(mcp: McpClient, tool: str, **args: Any) -> dict[str, Any]:
    result = await mcp.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    assert result.structured_content is not None
    return result.structured_content


async def test_a_stalled_job_over_mcp(server) -> None:
    async with McpClient(server) as mcp:
        job = await ok(
            mcp, "launch_job", command=[PY, "-c", SILENT], track=False, stall_timeout_min=0.03
        )
        waited = await ok(mcp, "wait_for_jobs", job_ids=[job["job_id"]], timeout_s=60)
        [info] = waited["jobs"]
        assert info["status"] == "FAILED" and info["failure_kind"] == "user"
        got = await ok(mcp, "get_job", job_id=job["job_id"])
        assert "reason: stalled" in got["message"] and "<string>:4 <module>()" in got["message"]
