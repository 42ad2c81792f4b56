"""The agent's side of `air-mcp` over stdio (issue 18): every tool's text holds what its
description promises; safe launches (idempotency conflict, dry run catching a missing program
or script); a study seeded with prior jobs that does not rerun the baseline; PRUNED jobs."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters

PY = sys.executable
TRIAL = Path(__file__).resolve().parents[1] / "autoresearch" / "trial_script.py"
BASE = {"x": 0.0, "y": 0.0, "steps": 3, "sleep_s": 0.05}
PRUNED_REASON = "pruned by the median rule (trial 3)"  # as autoresearch/loop/watch.py cancels one
pytestmark = pytest.mark.anyio


def stdio(air_home: Path, air_mcp: list[str], cwd: Path, mlflow_uri: str) -> McpClient:
    command, *args = air_mcp
    env = {
        "AIR_HOME": str(air_home),
        "AIR_SIMULATED_GPUS": "2",
        "AIR_GRACE_S": "2",
        "MLFLOW_TRACKING_URI": mlflow_uri,
        "PATH": str(Path(PY).parent) + ":/usr/bin:/bin",
    }
    return McpClient(StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd)))


async def call(mcp: McpClient, tool: str, **args: Any) -> tuple[dict[str, Any], str, bool]:
    result = await mcp.call_tool(tool, args)
    return result.structured_content or {}, result.content[0].text, result.is_error  # type: ignore[union-attr]


async def ok(mcp: McpClient, tool: str, **args: Any) -> tuple[dict[str, Any], str]:
    reply, text, failed = await call(mcp, tool, **args)
    assert not failed, (tool, text)
    return reply, text


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return folder


async def test_every_tool_text_holds_what_its_description_promises(
    air_home: Path, air_mcp: list[str], workdir: Path, tracked: str
) -> None:
    texts: dict[str, str] = {}
    async with stdio(air_home, air_mcp, workdir, tracked) as mcp:
        job, texts["launch_job"] = await ok(
            mcp, "launch_job", command=[PY, str(TRIAL)], config=BASE, name="base"
        )
        job_id = job["job_id"]
        _, texts["wait_for_jobs"] = await ok(
            mcp, "wait_for_jobs", job_ids=[job_id], timeout_s=120, metric="loss"
        )
        got, texts["get_job"] = await ok(mcp, "get_job", job_id=job_id, metric="loss")
        _, texts["list_jobs"] = await ok(mcp, "list_jobs", metric="loss", order_by="best")
        _, texts["get_logs"] = await ok(mcp, "get_logs", job_id=job_id)
        _, texts["get_metrics"] = await ok(mcp, "get_metrics", job_id=job_id, keys=["loss"])
        other, _ = await ok(mcp, "launch_job", command=[PY, str(TRIAL)], config={**BASE, "x": 0.3})
        await ok(mcp, "wait_for_jobs", job_ids=[other["job_id"]], timeout_s=120)
        _, texts["compare_jobs"] = await ok(
            mcp, "compare_jobs", job_ids=[job_id, other["job_id"]], metric="loss", at_step=2
        )
        sleeper, _ = await ok(mcp, "launch_job", command=[PY, "-c", "import time; time.sleep(60)"])
        _, texts["cancel_job"] = await ok(mcp, "cancel_job", job_id=sleeper["job_id"])
        _, texts["list_gpus"] = await ok(mcp, "list_gpus")
        study = {
            "name": "seeded",
            "command": [PY, str(TRIAL)],
            "workdir": str(workdir),
            "base_config": BASE,
            "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
            "objective": {"metric": "loss", "direction": "minimize"},
            # prior jobs do not spend budget.trials (issue 39.7): one trial of its own
            "budget": {"trials": 1, "concurrency": 1},
            "noise": {"repeats": 0},
            "gpus_per_trial": 0,
            "proposer": "random",
        }
        folder = workdir / "studies" / "seeded"
        started, texts["start_study"] = await ok(
            mcp,
            "start_study",
            study=study,
            study_dir=str(folder),
            prior_jobs=[other["job_id"], job_id],
        )
        _, texts["wait_for_study"] = await ok(mcp, "wait_for_study", study=str(folder), timeout_s=5)
        state = await finished_study(mcp, folder)
        _, texts["get_study"] = await ok(mcp, "get_study", study=str(folder))
        _, texts["suggest_trials"] = await ok(
            mcp, "suggest_trials", study=str(folder), n=2, prior_jobs=[job_id]
        )
        _, texts["stop_study"] = await ok(mcp, "stop_study", study=str(folder))
        listed, _ = await ok(mcp, "list_jobs", limit=50)

    promised = {
        "launch_job": [job_id, "QUEUED" if "QUEUED" in texts["launch_job"] else "RUNNING", "next:"],
        "wait_for_jobs": ["wait: done", job_id, "SUCCEEDED", "loss best"],
        "get_job": [job_id, "SUCCEEDED", "ran ", "config: x=0.0", got["run_id"], "next:"],
        "list_jobs": [job_id, "SUCCEEDED", "loss per job", "best"],
        "get_logs": ["bytes 0-", "output of " + job_id],
        "get_metrics": [job_id, "loss"],
        "compare_jobs": ["compare loss at step 2", other["job_id"], "x=0.3"],
        "cancel_job": [sleeper["job_id"], "CANCELLED", "next:"],
        "list_gpus": ['"index":0', '"health":"ok"'],
        "start_study": ["seeded", str(folder), '"trials"'],
        "wait_for_study": ['"changed"', '"state"'],
        "get_study": ['"best"', '"recent"', '"decision"', '"budget"'],
        "suggest_trials": ['"rationale":"random: exploration', '"history":4'],
        "stop_study": ['"state"', "seeded"],
    }
    for tool, fields in promised.items():
        for field in fields:
            assert field in texts[tool], (tool, field, texts[tool][:800])
    # The baseline ran by hand is the study's trial 0: not run again; one new trial ran.
    assert started["trials"]["total"] >= 2
    assert state["trials"]["total"] == 3
    study_jobs = {t["job_id"] for t in state["recent"]}
    assert {job_id, other["job_id"]} <= study_jobs
    baseline = [t for t in state["recent"] if t["trial"] == 0]
    assert baseline and baseline[0]["job_id"] == job_id and baseline[0]["source"] == "baseline"
    # base, other, the cancelled sleeper and the one new trial: neither prior job ran again
    assert len(listed["items"]) == 4, listed


async def finished_study(mcp: McpClient, folder: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        state, _ = await ok(mcp, "wait_for_study", study=str(folder), timeout_s=10)
        if state["state"] != "running":
            return state
    raise AssertionError(f"the study did not finish: {state}")


async def test_safe_launches_conflict_and_dry_run(
    air_home: Path, air_mcp: list[str], workdir: Path, tracked: str
) -> None:
    async with stdio(air_home, air_mcp, workdir, tracked) as mcp:
        first, _ = await ok(
            mcp, "launch_job", command=[PY, "train.py"], config={"lr": 1}, idempotency_key="k1"
        )
        same, _ = await ok(
            mcp, "launch_job", command=[PY, "train.py"], config={"lr": 1}, idempotency_key="k1"
        )
        assert same["job_id"] == first["job_id"]
        _, text, failed = await call(
            mcp, "launch_job", command=[PY, "train.py"], config={"lr": 2}, idempotency_key="k1"
        )
        assert failed and text.startswith("[idempotency-conflict]"), text
        assert first["job_id"] in text and "config.lr: 1 -> 2" in text
        _, text, failed = await call(
            mcp, "launch_job", command=["pyhton", "train.py"], dry_run=True
        )
        assert failed and "pyhton: not found on PATH; did you mean python" in text, text
        _, text, failed = await call(mcp, "launch_job", command=[PY, "trian.py"], dry_run=True)
        assert failed and "trian.py: no such file in" in text, text
        assert "did you mean train.py?" in text
        dry, text = await ok(mcp, "launch_job", command=[PY, "train.py"], dry_run=True)
        assert dry["job_id"] == "dry-run" and "WOULD NOT START" not in text
        _, text, failed = await call(mcp, "launch_job", command="python train.py")
        assert failed and "give argv as a list" in text


async def test_pruned_jobs_are_pruned_everywhere(
    air_home: Path, air_mcp: list[str], workdir: Path, tracked: str
) -> None:
    async with stdio(air_home, air_mcp, workdir, tracked) as mcp:
        job, _ = await ok(
            mcp, "launch_job", command=[PY, "-c", "import time; time.sleep(60)"], track=False
        )
        job_id = job["job_id"]
        cancelled, text = await ok(mcp, "cancel_job", job_id=job_id, reason=PRUNED_REASON)
        assert cancelled["status"] == "PRUNED" and "PRUNED" in text
        got, text = await ok(mcp, "get_job", job_id=job_id)
        assert got["status"] == "PRUNED" and f"{job_id} (python" in text and "PRUNED" in text
        page, text = await ok(mcp, "list_jobs")
        assert [j["status"] for j in page["items"]] == ["PRUNED"]
        assert f"PRUNED: {job_id}" in text and "CANCELLED" not in text
        waited, text = await ok(mcp, "wait_for_jobs", job_ids=[job_id], timeout_s=5)
        assert waited["jobs"][0]["status"] == "PRUNED" and "PRUNED" in text
