"""Long waits do not starve the other tools: cancel_job always answers while 40 waits wait."""

from __future__ import annotations

import sys

import anyio
import pytest
from mcp import Client as McpClient
from mcp.types import CallToolResult

PY = sys.executable
pytestmark = pytest.mark.anyio
WAIT_S = 240  # the waits' own timeout: the other calls must answer well before it


async def test_forty_waits_leave_list_gpus_and_cancel_job_answering(server) -> None:
    async with McpClient(server) as mcp:
        launched = await mcp.call_tool(
            "launch_job", {"command": [PY, "-c", "import time; time.sleep(600)"], "track": False}
        )
        job_id = launched.structured_content["job_id"]  # type: ignore[index]
        waited: list[CallToolResult] = []

        async def wait() -> None:
            args = {"job_ids": [job_id], "timeout_s": WAIT_S}
            waited.append(await mcp.call_tool("wait_for_jobs", args))

        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(wait)
            await anyio.sleep(1)  # every wait has started and is waiting
            with anyio.fail_after(WAIT_S / 4):  # a failure bound, not a speed test
                gpus = await mcp.call_tool("list_gpus", {})
                assert not gpus.is_error and len(gpus.structured_content["gpus"]) == 4  # type: ignore[index]
                assert waited == []
                cancelled = await mcp.call_tool("cancel_job", {"job_id": job_id})
                assert cancelled.structured_content["status"] == "CANCELLED"  # type: ignore[index]
        assert len(waited) == 40
        assert all(w.structured_content["jobs"][0]["status"] == "CANCELLED" for w in waited)  # type: ignore[index]


async def test_waits_beyond_the_session_cap_are_refused(
    client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server import waiting
    from mcp_server.server import build_server

    monkeypatch.setattr(waiting, "MAX_WAITS_PER_SESSION", 3)
    server = build_server(client)
    async with McpClient(server) as mcp:
        launched = await mcp.call_tool(
            "launch_job", {"command": [PY, "-c", "import time; time.sleep(600)"], "track": False}
        )
        job_id = launched.structured_content["job_id"]  # type: ignore[index]
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(
                    mcp.call_tool, "wait_for_jobs", {"job_ids": [job_id], "timeout_s": 60}
                )
            await anyio.sleep(1)
            fourth = await mcp.call_tool("wait_for_jobs", {"job_ids": [job_id], "timeout_s": 60})
            assert fourth.is_error
            assert fourth.content[0].text.startswith("[too-many-waits]")  # type: ignore[union-attr]
            await mcp.call_tool("cancel_job", {"job_id": job_id})
        again = await mcp.call_tool("wait_for_jobs", {"job_ids": [job_id], "timeout_s": 5})
        assert not again.is_error  # the slots came back when the waits ended
