"""Nothing special for Slurm above the backend: the MCP tools and a study run Slurm jobs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient

from air_skills import JobStatus

PY = sys.executable
JOB = "import sys; print('on slurm'); print('---'); print('loss: 0.25')"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_mcp_tools_launch_wait_read_and_cancel_a_slurm_job(slurm_client) -> None:
    from mcp_server.server import build_server

    async with McpClient(build_server(slurm_client)) as mcp:
        launched = await mcp.call_tool(
            "launch_job", {"command": [PY, "-c", JOB], "gpus": 1, "name": "s"}
        )
        assert not launched.is_error, launched.content
        job_id = launched.structured_content["job_id"]
        waited = await mcp.call_tool("wait_for_jobs", {"job_ids": [job_id], "timeout_s": 90})
        assert not waited.is_error, waited.content
        got = await mcp.call_tool("get_job", {"job_id": job_id})
        assert got.structured_content["status"] == "SUCCEEDED", got.structured_content
        logs = await mcp.call_tool("get_logs", {"job_id": job_id})
        assert "on slurm" in logs.content[0].text
        held = await mcp.call_tool(
            "launch_job", {"command": [PY, "-c", "import time; time.sleep(300)"], "name": "h"}
        )
        held_id = held.structured_content["job_id"]
        cancelled = await mcp.call_tool("cancel_job", {"job_id": held_id})
        assert not cancelled.is_error, cancelled.content
    assert slurm_client.get(held_id).status == JobStatus.CANCELLED
    assert slurm_client.store.row(held_id).backend == "slurm"


@pytest.mark.slow
def test_a_study_with_backend_slurm_runs_its_trials_on_slurm(slurm_client, tmp_path) -> None:
    from autoresearch.loop.loop import run_study

    trial_script = Path(__file__).parents[1] / "autoresearch" / "trial_script.py"
    study = {
        "name": "slurm-study",
        "command": [PY, str(trial_script)],
        "workdir": str(trial_script.parent),
        "base_config": {"x": 0.0, "y": 0.0, "steps": 3, "sleep_s": 0.05},
        "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 3, "concurrency": 2},
        "gpus_per_trial": 0,
        "proposer": "random",
        "backend": "slurm",
    }
    result = run_study(study, tmp_path / "study", client=slurm_client, poll_s=0.3)
    rows = slurm_client.store.rows("WHERE backend='slurm'")
    assert len(rows) >= 3, result
    assert all(r.backend_ref and r.backend_ref.startswith("slurm:") for r in rows)
    assert sum(r.status == "SUCCEEDED" for r in rows) >= 3
    assert Path(tmp_path / "study").is_dir()
