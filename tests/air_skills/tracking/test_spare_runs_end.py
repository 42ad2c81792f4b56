"""Spare MLflow runs never pose as running work (issue 30): four `air-spare` runs stayed
RUNNING after one job, with no supervisor left. A spare is SCHEDULED until a job claims it,
and `air gc` ends and hides those that no supervisor keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import GATED, open_gate, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.process.proc import alive
from air_skills.runtime.runs import spare_runs
from air_skills.tracking.mlflow import SPARE_TAG

PY = sys.executable
AIR = str(Path(PY).parent / "air")


def spare_runs_in_mlflow(client: Client, experiment: str) -> list:
    from mlflow.entities import ViewType

    mlflow = client.tracker.client
    exp = mlflow.get_experiment_by_name(experiment)
    return mlflow.search_runs(
        [exp.experiment_id], filter_string=f"tags.`{SPARE_TAG}` = '1'", run_view_type=ViewType.ALL
    )


def no_supervisor(client: Client) -> bool:
    """No supervisor on record, nor any that ran a job (one between its job and its idle
    record is on neither list for a moment)."""
    ran = {r["pid"] for r in client.store.read("SELECT supervisor_pid AS pid FROM jobs", ())}
    return not any(alive(pid, None) for pid in client.store.supervisor_pids() | ran if pid)


def air_gc(home: Path, *extra: str) -> dict:
    done = subprocess.run(
        [AIR, "gc", "--json", *extra], capture_output=True, text=True, timeout=120,
        env={**os.environ, "AIR_HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_spares_are_not_running_and_gc_ends_them_once_no_supervisor_keeps_them(
    air_home: Path,
) -> None:
    client = Client(air_home)
    client.runtime.keep_spares = True  # a long-lived launcher (air-mcp, the loop)
    job = client.launch(JobSpec(command=[PY, "-c", "pass"], experiment="exp-g", code="live"))
    (info,) = client.wait([job.job_id], timeout_s=180)
    assert info.status == JobStatus.SUCCEEDED
    uri = client.tracker.uri
    wait_until(lambda: client.store.spare_count(uri, "exp-g") == spare_runs.PER_POOL, 120)
    runs = spare_runs_in_mlflow(client, "exp-g")
    assert len(runs) == spare_runs.PER_POOL
    assert {r.info.status for r in runs} == {"SCHEDULED"}  # made ahead: nothing runs in them
    # a job still claims one and runs in it
    second = client.launch(JobSpec(command=[PY, "-c", "pass"], experiment="exp-g", code="live"))
    claimed = second.run_id
    (done,) = client.wait([second.job_id], timeout_s=180)
    assert done.status == JobStatus.SUCCEEDED and done.run_id == claimed
    assert client.tracker.client.get_run(claimed).info.status == "FINISHED"
    wait_until(lambda: no_supervisor(client), 120)  # the lingering supervisor went
    left = {r["run_id"] for r in client.store.all_spares()}
    assert left and claimed not in left
    assert air_gc(air_home, "--dry-run")["spare_runs_ended"] == len(left)
    assert client.store.all_spares()  # a dry run ends nothing
    report = air_gc(air_home)
    assert report["spare_runs_ended"] == len(left) and not client.store.all_spares()
    for run_id in left:
        run = client.tracker.client.get_run(run_id)
        assert run.info.lifecycle_stage == "deleted" and run.info.status == "KILLED"


def test_gc_keeps_the_spares_of_a_live_supervisor(air_home: Path, tmp_path: Path) -> None:
    client = Client(air_home)
    client.runtime.keep_spares = True
    # The job waits for a gate in its own folder (a sandboxed job's /tmp is its own).
    job = client.launch(JobSpec(command=[PY, "-c", GATED], experiment="exp-l", code="live"))
    try:
        uri = client.tracker.uri
        wait_until(lambda: client.store.spare_count(uri, "exp-l") == spare_runs.PER_POOL, 120)
        report = client.code.gc()
        assert report["spare_runs_ended"] == 0 and report["spare_runs_kept"] >= spare_runs.PER_POOL
        assert client.store.spare_count(uri, "exp-l") == spare_runs.PER_POOL
    finally:
        open_gate(air_home / "jobs" / job.job_id)
        assert client.wait([job.job_id], timeout_s=180)[0].status == JobStatus.SUCCEEDED
