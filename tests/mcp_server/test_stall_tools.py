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


async def test_on_stall_fail_reaches_the_job_and_list_jobs_shows_the_stall(server, client) -> None:
    async with McpClient(server) as mcp:
        job = await ok(
            mcp,
            "launch_job",
            command=[PY, "-c", SILENT],
            track=False,
            stall_timeout_min=0.03,
            on_stall="fail",
        )
        assert client.store.row(job["job_id"]).spec_dict()["on_stall"] == "fail"
        await ok(mcp, "wait_for_jobs", job_ids=[job["job_id"]], timeout_s=60)
        result = await mcp.call_tool("list_jobs", {})
        [item] = result.structured_content["items"]  # type: ignore[index]
        assert item["status"] == "FAILED" and item["stalled"].startswith("stalled ")
        assert "<string>:4 <module>()" in item["stalled"] and len(item["stalled"]) <= 80
        text = result.content[0].text  # type: ignore[union-attr]
        assert f"FAILED: {job['job_id']}" in text and "(stalled " in text


async def test_wait_for_jobs_returns_when_a_watched_job_stalls_and_says_so(server) -> None:
    """Under on_stall: notify the job keeps running: the wait still ends, and says why."""
    async with McpClient(server) as mcp:
        job = await ok(
            mcp,
            "launch_job",
            command=[PY, "-c", SILENT],
            track=False,
            stall_timeout_min=0.03,
            on_stall="notify",
        )
        result = await mcp.call_tool("wait_for_jobs", {"job_ids": [job["job_id"]], "timeout_s": 90})
        waited = result.structured_content
        assert waited is not None and waited["stalled"] == [job["job_id"]]
        assert waited["timed_out"] is False and waited["jobs"][0]["status"] == "RUNNING"
        text = result.content[0].text  # type: ignore[union-attr]
        assert f"wait: {job['job_id']} stalled" in text and "(stalled " in text
        page = await ok(mcp, "list_jobs", status="RUNNING")
        assert page["items"][0]["stalled"].startswith("stalled ")
        await ok(mcp, "cancel_job", job_id=job["job_id"])
