"""Leaderboards and comparisons over MCP say when jobs ran on different hardware classes
(issue 27): a GPU job and a CPU job, both logging the metric."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import wait_until
from mcp import Client as McpClient

from air_skills import Client
from air_skills.gpu.hardware import write_record
from air_skills.models import JobSpec

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
SCRIPT = "import sys; print('---'); print('loss: ' + sys.argv[1])"


def _run(client: Client, loss: str, gpus: int) -> str:
    info = client.launch(JobSpec(command=[sys.executable, "-c", SCRIPT, loss], gpus=gpus))
    assert client.wait([info.job_id], timeout_s=120)[0].status.value == "SUCCEEDED"
    wait_until(lambda: client.get(info.job_id).hardware)  # recorded beside the run's start
    return info.job_id


async def test_leaderboard_and_compare_flag_mixed_hardware(
    tracked: str, server, client: Client
) -> None:
    gpu_job = _run(client, "0.3", gpus=1)
    cpu_job = _run(client, "0.2", gpus=0)
    # A simulated GPU computes on the CPU: its class is the CPU slot's (issue 39.6). An H100
    # cannot exist here: its record stands in for one, as the job's folder would hold it.
    record = client.get(gpu_job).hardware
    assert record["class"] == "CPU"
    folder = Path(client.store.row(gpu_job).log_path).parent
    write_record(folder, {**record, "class": "H100 80GB", "gpu_model": "NVIDIA H100 80GB HBM3"})
    note = "not comparable: CPU vs H100 80GB"
    async with McpClient(server) as mcp:
        board = await mcp.call_tool("list_jobs", {"metric": "loss", "order_by": "best"})
        assert not board.is_error, board.content
        page = board.structured_content
        assert [j["job_id"] for j in page["items"]] == [cpu_job, gpu_job]
        assert page["hardware"] == note
        plain = await mcp.call_tool("list_jobs", {})
        assert "hardware" not in plain.structured_content  # no metric: nothing ranked
        compared = await mcp.call_tool("compare_jobs", {"job_ids": [gpu_job, cpu_job]})
        rows = compared.structured_content["rows"]
        assert rows[0]["hardware"].startswith("H100 80GB (not comparable")
        assert rows[1]["hardware"].startswith("CPU (not comparable")
        # the text says it too, not only the structured content
        assert "hardware H100 80GB (not comparable: H100 80GB vs CPU)" in compared.content[0].text
