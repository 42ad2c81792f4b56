"""Launches that keep MLflow out of their process (the CLI): the job's run is a claimed spare
or made by its supervisor, and the job logs into it from its first metric either way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.runs import spare_runs
from air_skills.runtime.runs.job_run import PLAN
from air_skills.tracking.mlflow import SPARE_TAG, MlflowTracker

PY = sys.executable

# The job's first instructions: its run id, then a metric into that run.
FIRST_METRIC = (
    "import os\n"
    "print('run', os.environ['MLFLOW_RUN_ID'])\n"  # read first: MLflow removes it
    "import mlflow\n"
    "mlflow.log_metric('first', 1.0, step=0)\n"
)


def cli_client(home: Path) -> Client:
    """A Client as the `air` CLI makes it: no MLflow in the launching process."""
    client = Client(home)
    client.runtime.make_runs_here = False
    return client


def make_spares(home: Path, experiment: str) -> list[str]:
    """Ask for the pool as a CLI launch does, and fill it as a supervisor does."""
    client = cli_client(home)
    tracker = MlflowTracker(client.home)
    with client.store.tx() as c:
        spare_runs.want(client.store, c, tracker.uri, experiment)
    assert spare_runs.top_up(client.store, tracker) == spare_runs.PER_POOL
    return [r["run_id"] for r in client.store.spare_candidates(tracker.uri, experiment)]


def wait_done(client: Client, job_id: str):
    (info,) = client.wait([job_id], timeout_s=180)
    assert info.status == JobStatus.SUCCEEDED, (info.message, client.logs(job_id).text)
    return info


def test_a_run_without_a_spare_is_made_before_the_command(air_home: Path) -> None:
    """No spare: the run is written into MLflow's sqlite tables as the job starts (no MLflow
    in the launching process: tracking/sqlite_runs.py), then completed from the plan."""
    client = cli_client(air_home)
    spec = JobSpec(
        command=[PY, "-c", FIRST_METRIC],
        config={"lr": 0.1, "model": {"depth": 2}},
        tags={"team": "x"},
        name="first-metric",
    )
    launched = client.launch(spec)
    info = wait_done(client, launched.job_id)
    assert info.run_id and f"run {info.run_id}" in client.logs(info.job_id).text
    run = client.tracker.client.get_run(info.run_id)
    assert run.data.metrics["first"] == 1.0 and run.info.status == "FINISHED"
    assert run.data.params == {"lr": "0.1", "model.depth": "2"}
    assert run.data.tags["air.job_id"] == info.job_id and run.data.tags["team"] == "x"
    assert run.info.run_name == "first-metric"
    assert not (air_home / "jobs" / info.job_id / PLAN).exists()


def test_a_claimed_spare_gets_the_jobs_name_params_and_tags(air_home: Path) -> None:
    spares = make_spares(air_home, "exp-s")
    client = cli_client(air_home)
    launched = client.launch(
        JobSpec(
            command=[PY, "-c", FIRST_METRIC],
            config={"lr": 0.2},
            experiment="exp-s",
            tags={"team": "y"},
            name="spare-job",
        )
    )
    assert launched.run_id in spares  # known at launch: the job starts with it
    info = wait_done(client, launched.job_id)
    assert info.run_id == launched.run_id and f"run {info.run_id}" in client.logs(info.job_id).text
    run = client.tracker.client.get_run(info.run_id)
    assert run.data.metrics["first"] == 1.0 and run.info.status == "FINISHED"
    assert run.data.params == {"lr": "0.2"}
    assert run.data.tags["air.job_id"] == info.job_id and run.data.tags["team"] == "y"
    assert SPARE_TAG not in run.data.tags and run.info.run_name == "spare-job"
    assert launched.run_id not in {
        r["run_id"] for r in client.store.spare_candidates(client.tracker.uri, "exp-s")
    }


def test_a_spare_of_a_deleted_experiment_is_not_used(air_home: Path) -> None:
    spares = make_spares(air_home, "gone")
    client = cli_client(air_home)
    mlflow = client.tracker.client
    mlflow.delete_experiment(mlflow.get_experiment_by_name("gone").experiment_id)
    launched = client.launch(JobSpec(command=[PY, "-c", FIRST_METRIC], experiment="gone"))
    assert launched.run_id is None  # no spare handed out: the supervisor makes the run
    assert not client.store.spare_candidates(client.tracker.uri, "gone")
    info = wait_done(client, launched.job_id)
    assert info.run_id not in spares
    assert mlflow.get_run(info.run_id).data.metrics["first"] == 1.0


def test_concurrent_launches_never_share_a_spare(air_home: Path) -> None:
    make_spares(air_home, "race")
    code = (
        "from air_skills import Client, JobSpec\n"
        "c = Client(); c.runtime.make_runs_here = False\n"
        "i = c.launch(JobSpec(command=['true'], experiment='race'))\n"
        "print(i.job_id, i.run_id)\n"
    )
    procs = [
        subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1].decode()[-500:] for o in outs]
    launched = [o[0].decode().split() for o in outs]
    at_launch = [run for _, run in launched if run != "None"]
    assert at_launch and len(set(at_launch)) == len(at_launch)
    client = Client(air_home)
    done = client.wait([job for job, _ in launched], timeout_s=240, any=False)
    runs = [i.run_id for i in done]
    assert all(runs) and len(set(runs)) == 8, runs


def test_python_api_keeps_its_run_id_at_launch_and_makes_no_spares(client: Client) -> None:
    info = client.launch(JobSpec(command=[PY, "-c", "pass"]))
    assert info.run_id
    wait_done(client, info.job_id)
    assert not client.store.wanted_pools(client.tracker.uri, 0)


@pytest.mark.parametrize("argv", [["launch", "--json", "--code", "live", "--", "true"]])
def test_cli_process_does_not_import_mlflow(air_home: Path, tmp_path: Path, argv) -> None:
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['air', *{argv!r}]\n"
        "try:\n"
        "    from air_skills.cli.app import main\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = 'mlflow' in sys.modules\n"
        "print('MLFLOW-LOADED' if loaded else 'MLFLOW-NOT-LOADED', file=sys.stderr)\n"
    )
    out = subprocess.run([PY, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert "MLFLOW-NOT-LOADED" in out.stderr, out.stderr[-2000:]
    info = json.loads(out.stdout)
    assert info["job_id"]  # its run: written in SQL (sqlite_runs) or by its supervisor


def test_a_launch_killed_before_its_commit_leaves_its_spare_in_the_pool(
    air_home: Path, tmp_path: Path
) -> None:
    spares = set(make_spares(air_home, "air-default"))
    code = (
        "from air_skills import Client, JobSpec\n"
        "c = Client(); c.runtime.make_runs_here = False\n"
        "c.launch(JobSpec(command=['true'], code='live'))\n"
    )
    env = {**os.environ, "AIR_HOME": str(air_home), "AIR_TEST_CRASH_AT": "launch:placed"}
    proc = subprocess.run([PY, "-c", code], env=env, capture_output=True, cwd=tmp_path)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-1000:]
    client = cli_client(air_home)
    left = {r["run_id"] for r in client.store.spare_candidates(client.tracker.uri, "air-default")}
    assert left == spares  # the claim was rolled back with the transaction
    assert client.store.rows() == []


def test_a_long_lived_launcher_asks_for_spares_from_its_first_launch(air_home: Path) -> None:
    """air-mcp and the loop (keep_spares) make their first run themselves; that launch still
    asks for the pool, so the next launch claims a spare and its job logs into it."""
    client = Client(air_home)
    client.runtime.keep_spares = True
    first = client.launch(JobSpec(command=[PY, "-c", "pass"], experiment="exp-k", code="live"))
    assert first.run_id  # no spare yet: made in this process, as the Python API does
    wait_done(client, first.job_id)
    uri = client.tracker.uri
    wait_until(lambda: client.store.spare_count(uri, "exp-k") == spare_runs.PER_POOL, 120)
    spares = {r["run_id"] for r in client.store.spare_candidates(uri, "exp-k")}
    second = client.launch(
        JobSpec(command=[PY, "-c", FIRST_METRIC], experiment="exp-k", code="live")
    )
    assert second.run_id in spares
    info = wait_done(client, second.job_id)
    run = client.tracker.client.get_run(info.run_id)
    assert run.data.metrics["first"] == 1.0 and SPARE_TAG not in run.data.tags


def test_the_kept_reader_of_mlflows_tables_sees_each_change(air_home: Path) -> None:
    """Launches check spares through one kept read-only connection: a spare deleted, or its
    experiment deleted, after it was opened is seen at the next check."""
    from air_skills.tracking.run_state import usable_runs

    spares = make_spares(air_home, "exp-d")
    tracker = MlflowTracker(air_home)
    assert usable_runs(tracker.uri, spares) == set(spares)  # opens and keeps the reader
    tracker.client.delete_run(spares[0])
    assert usable_runs(tracker.uri, spares) == set(spares[1:])
    tracker.client.delete_experiment(tracker.experiment_id("exp-d"))
    assert usable_runs(tracker.uri, spares) == set()


def test_a_job_cancelled_while_its_run_is_made_never_starts(air_home: Path, tmp_path: Path) -> None:
    """No spare, and an experiment only MLflow handles (deleted: MLflow restores it, so
    sqlite_runs leaves it): the supervisor makes the run first, through the home's writer.
    The test holds the writer's lock (no writer can run), cancels the job meanwhile, then
    lets a writer run: the run is made, the cancel is read before the command would start,
    and it never does."""
    import fcntl
    import time

    from air_skills.tracking import writer

    client = cli_client(air_home)
    client.tracker.client.delete_experiment(client.tracker.experiment_id("restored"))
    marker = tmp_path / "ran"
    lock = os.open(writer.spool(air_home) / writer.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        launched = client.launch(
            JobSpec(
                command=[PY, "-c", f"open({str(marker)!r}, 'w'); import time; time.sleep(60)"],
                sandbox="off",  # its marker is written where the test looks
                experiment="restored",
            )
        )
        assert launched.run_id is None
        plan = air_home / "jobs" / launched.job_id / PLAN
        wait_until(lambda: list(writer.spool(air_home).glob("req-*")) and plan.exists())
        client.cancel(launched.job_id, wait_s=0)  # the supervisor waits for create_run
    finally:
        os.close(lock)
    (info,) = client.wait([launched.job_id], timeout_s=180)
    assert info.status == JobStatus.CANCELLED, info.message
    assert not marker.exists()  # its command never started (nor was it put on record)
    assert client.store.row(launched.job_id).job_pid is None  # type: ignore[union-attr]
    deadline = time.monotonic() + 120
    while client.tracker.client.get_run(str(info.run_id)).info.status != "KILLED":
        assert time.monotonic() < deadline, "the run was never ended"
        time.sleep(0.05)
