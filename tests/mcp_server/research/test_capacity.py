"""Capacity in view (issue 24): list_gpus reports CPU slots and GPUs (total, used, queued),
and a queued job's message names what it waits for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until
from mcp import Client as McpClient

from air_skills import Client

pytestmark = pytest.mark.anyio
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


async def test_list_gpus_counts_slots_and_a_queued_job_says_why(
    server, client: Client, monkeypatch: pytest.MonkeyPatch, air_home: Path
) -> None:
    monkeypatch.setenv("AIR_CPU_SLOTS", "1")
    async with McpClient(server) as mcp:
        ids = []
        for gpus in (0, 0, 1):
            job = await mcp.call_tool(
                "launch_job", {"command": SLEEP, "gpus": gpus, "track": False}
            )
            ids.append(job.structured_content["job_id"])
        wait_until(lambda: client.get(ids[2]).status.value == "RUNNING", timeout_s=60)
        reply = await mcp.call_tool("list_gpus", {})
        cap = reply.structured_content["capacity"]
        assert cap["cpu_slots"] == {"total": 1, "used": 1, "queued": 1}
        assert cap["gpus"] == {"total": 4, "schedulable": 4, "used": 1, "queued": 0}
        queued = await mcp.call_tool("get_job", {"job_id": ids[1]})
        assert queued.structured_content["status"] == "QUEUED"
        assert "waiting for a CPU slot (all 1 in use" in queued.structured_content["message"]
    shown = subprocess.run(
        [sys.executable, "-m", "air_skills.cli", "gpus"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert "CPU slots 1/1 in use, 1 queued" in shown.stdout, shown.stdout + shown.stderr
    client.cancel_all("test done")
