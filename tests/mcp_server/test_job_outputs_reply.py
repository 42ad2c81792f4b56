"""get_job names a job's outputs (issue 38.6) without paying for the empty checkpoint folder air
makes for every job: that one is named once the job wrote into it. Naming it in every reply put
get_job over its 1,000 bytes (test_server.py::test_replies_are_compact). Real jobs over the MCP
SDK client."""

from __future__ import annotations

import sys

import pytest
from mcp import Client as McpClient

from air_skills import Client

pytestmark = pytest.mark.anyio

PY = sys.executable
WRITES = (
    "import os; d = os.environ['AIR_CHECKPOINT_DIR'];"
    " open(os.path.join(d, 'last.pt'), 'w').write('weights')"
)


async def test_checkpoint_folder_named_once_written(server, client: Client) -> None:
    async with McpClient(server) as mcp:
        wrote = (
            await mcp.call_tool("launch_job", {"command": [PY, "-c", WRITES]})
        ).structured_content
        quiet = (
            await mcp.call_tool("launch_job", {"command": [PY, "-c", "pass"]})
        ).structured_content
        ids = [wrote["job_id"], quiet["job_id"]]
        await mcp.call_tool("wait_for_jobs", {"job_ids": ids, "timeout_s": 120, "mode": "all"})
        folder = str(client.home / "jobs" / wrote["job_id"] / "checkpoints")
        got = await mcp.call_tool("get_job", {"job_id": wrote["job_id"]})
        assert got.structured_content["status"] == "SUCCEEDED", got.structured_content
        assert got.structured_content["outputs"] == [folder]
        assert f"outputs: {folder}" in got.content[0].text
        empty = await mcp.call_tool("get_job", {"job_id": quiet["job_id"]})
        assert empty.structured_content["status"] == "SUCCEEDED", empty.structured_content
        assert "outputs" not in empty.structured_content  # nothing written: nothing to name
        assert "outputs:" not in empty.content[0].text
        # air status (JobInfo) still names the folder it may write into
        assert client.get(quiet["job_id"]).outputs == [
            str(client.home / "jobs" / quiet["job_id"] / "checkpoints")
        ]
