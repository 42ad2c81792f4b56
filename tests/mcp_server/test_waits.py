"""Long waits do not starve the other tools: cancel_job always answers while 40 waits wait."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import pytest
from mcp import Client as McpClient
from mcp.types import CallToolResult

PY = sys.executable
pytestmark = pytest.mark.anyio
WAIT_S = 240  # the waits' own timeout: the other calls must answer well before it


def on_progress(reported: set[int], n: int) -> Callable[..., Awaitable[None]]:
    """A wait's progress callback: its first report (sent once it holds its slot and has
    looked at the jobs) marks wait ``n`` as waiting."""

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        reported.add(n)

    return progress


async def until_reported(reported: set[int], count: int) -> None:
    """Poll, with a deadline, until ``count`` waits are waiting (a fixed sleep may end before
    they have started on a loaded machine)."""
    with anyio.fail_after(60):
        while len(reported) < count:
            await anyio.sleep(0.05)


async def test_forty_waits_leave_list_gpus_and_cancel_job_answering(server) -> None:
    async with McpClient(server) as mcp:
        launched = await mcp.call_tool(
            "launch_job", {"command": [PY, "-c", "import time; time.sleep(600)"], "track": False}
        )
        job_id = launched.structured_content["job_id"]  # type: ignore[index]
        waited: list[CallToolResult] = []

        reported: set[int] = set()

        async def wait(n: int) -> None:
            args = {"job_ids": [job_id], "timeout_s": WAIT_S}
            progress = on_progress(reported, n)
            waited.append(await mcp.call_tool("wait_for_jobs", args, progress_callback=progress))

        async with anyio.create_task_group() as tg:
            for n in range(40):
                tg.start_soon(wait, n)
            await until_reported(reported, 40)  # every wait has started and is waiting
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
        reported: set[int] = set()
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(
                    partial(mcp.call_tool, progress_callback=on_progress(reported, n)),
                    "wait_for_jobs",
                    {"job_ids": [job_id], "timeout_s": 60},
                )
            await until_reported(reported, 3)
            fourth = await mcp.call_tool("wait_for_jobs", {"job_ids": [job_id], "timeout_s": 60})
            assert fourth.is_error
            assert fourth.content[0].text.startswith("[too-many-waits]")  # type: ignore[union-attr]
            await mcp.call_tool("cancel_job", {"job_id": job_id})
        again = await mcp.call_tool("wait_for_jobs", {"job_ids": [job_id], "timeout_s": 5})
        assert not again.is_error  # the slots came back when the waits ended
