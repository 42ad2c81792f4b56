"""A job's first run written into MLflow's sqlite tables (tracking/sqlite_runs.py): MLflow reads
it as one of its own, the job starts while MLflow cannot even be imported, and any store that
is not the one it was written for is left to MLflow."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobStatus
from air_skills.tracking import sqlite_runs
from air_skills.tracking.mlflow import MlflowTracker
from air_skills.tracking.sqlite_store import _head_revision, head_without_import

AIR = str(Path(sys.executable).parent / "air")


def _store(home: Path) -> MlflowTracker:
    """A home's sqlite store, built as air builds it (MLflow's migrations or the template)."""
    home.mkdir(parents=True, exist_ok=True)
    tracker = MlflowTracker(home)
    assert tracker.client is not None  # builds the store
    return tracker


def _make(tracker: MlflowTracker, experiment: str, **kw) -> tuple[str, str] | None:
    return sqlite_runs.create_run(
        tracker.uri,
        experiment,
        tracker.artifact_root(experiment),
        name=kw.pop("name", "first"),
        tags=kw.pop("tags", {"air.job_id": "job-x", "air.attempt": "1"}),
    )


def test_the_installed_mlflow_writes_a_schema_this_knows() -> None:
    # A new MLflow moves its head: this fails, and sqlite_runs must be checked against it.
    assert _head_revision() in sqlite_runs.KNOWN_SCHEMAS
    assert head_without_import() == _head_revision()  # read from its migration files


def test_mlflow_reads_a_run_and_experiment_made_here_as_its_own(tmp_path: Path) -> None:
    tracker = _store(tmp_path / "home")
    made = _make(tracker, "brand-new", name="trial-0", tags={"air.job_id": "job-1", "team": "x"})
    assert made is not None
    run_id, exp_id = made
    client = tracker.client
    exp = client.get_experiment_by_name("brand-new")
    assert exp.experiment_id == exp_id and exp.lifecycle_stage == "active"
    assert exp.artifact_location == tracker.artifact_root("brand-new")
    assert tracker.experiment_id("brand-new") == exp_id  # found, not made twice
    run = client.get_run(run_id)
    assert (run.info.run_name, run.info.status, run.info.experiment_id) == (
        "trial-0",
        "RUNNING",
        exp_id,
    )
    assert run.data.tags == {"air.job_id": "job-1", "team": "x", "mlflow.runName": "trial-0"}
    # MLflow's own run in the same experiment: the artifact URI has the same shape.
    own = client.create_run(exp_id, run_name="own")
    assert run.info.artifact_uri == own.info.artifact_uri.replace(own.info.run_id, run_id)
    # It takes what a job and its supervisor write, and ends as MLflow's own runs do.
    client.log_metric(run_id, "loss", 0.5, step=1)
    tracker.fill_run(run_id, name="trial-0", config={"lr": 0.1}, tags={"air.attempt": "1"})
    client.set_terminated(run_id, "FINISHED")
    run = client.get_run(run_id)
    assert run.data.metrics == {"loss": 0.5} and run.data.params == {"lr": "0.1"}
    assert run.info.status == "FINISHED" and run.data.tags["air.attempt"] == "1"
    found = client.search_runs([exp_id], "tags.`air.job_id` = 'job-1'")
    assert [r.info.run_id for r in found] == [run_id]


def test_a_run_goes_into_an_experiment_mlflow_made(tmp_path: Path) -> None:
    tracker = _store(tmp_path / "home")
    exp_id = tracker.experiment_id("made-by-mlflow")
    made = _make(tracker, "made-by-mlflow")
    assert made is not None and made[1] == exp_id
    assert len(tracker.client.search_experiments()) == 2  # Default and this one


def test_whatever_it_was_not_written_for_is_left_to_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker = _store(tmp_path / "home")
    db = Path(tracker.uri.removeprefix("sqlite:///"))
    # A deleted experiment: MLflow restores it (tracking/mlflow.py), this does not.
    tracker.client.delete_experiment(tracker.experiment_id("gone"))
    assert _make(tracker, "gone") is None
    # Names and tags MLflow would refuse: MLflow says what is wrong.
    assert _make(tracker, "ok", name="x" * 251) is None
    assert _make(tracker, "ok", tags={"mlflow.runName": "other"}) is None
    # MLflow's workspaces.
    monkeypatch.setenv("MLFLOW_ENABLE_WORKSPACES", "true")
    assert _make(tracker, "ok") is None
    monkeypatch.delenv("MLFLOW_ENABLE_WORKSPACES")
    # Not a sqlite store, or one not built yet: nothing is created.
    missing = tmp_path / "none" / "mlflow.db"
    assert sqlite_runs.create_run(f"sqlite:///{missing}", "ok", None, name="a", tags={}) is None
    assert not missing.parent.exists()
    assert sqlite_runs.create_run("http://127.0.0.1:1", "ok", None, name="a", tags={}) is None
    # Another schema version (an older or newer MLflow, a migration half done).
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'other'")
    assert _make(tracker, "ok") is None
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM experiments WHERE name='ok'").fetchone() == (0,)


def _make_many(args: tuple[str, str, int]) -> list[str]:
    home, experiment, n = args
    tracker = MlflowTracker(Path(home))
    out = []
    for i in range(n):
        made = _make(tracker, experiment, name=f"r{i}")
        assert made is not None
        out.append(made[1])
    return out


def test_concurrent_writers_make_one_experiment(tmp_path: Path) -> None:
    tracker = _store(tmp_path / "home")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.map(_make_many, [(str(tracker.home), "shared", 15)] * 3)
    assert len({e for r in results for e in r}) == 1
    (exp,) = [e for e in tracker.client.search_experiments() if e.name == "shared"]
    assert len(tracker.client.search_runs([exp.experiment_id], max_results=100)) == 45


# A package named mlflow ahead of the real one: importing it waits for the gate file, then
# hands over the real MLflow. Until the gate opens, no air process can load MLflow.
GATED_MLFLOW = """
import os, sys, time
while not os.path.exists(os.environ["AIR_TEST_MLFLOW_GATE"]):
    time.sleep(0.05)
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["mlflow"]
import mlflow
"""


@pytest.mark.parametrize("home_used_before", [True, False], ids=["store-there", "fresh-home"])
def test_a_jobs_first_run_needs_no_mlflow_import_before_its_command(
    air_home: Path, tmp_path: Path, home_used_before: bool
) -> None:
    """A job launched into a new experiment (no spare run) starts, with its run id, while
    MLflow cannot be imported anywhere; its supervisor completes the run once it can. Before
    sqlite_runs, the command waited for the run, made through MLflow: it never started here.
    On a fresh home the store is copied from the machine's template, also without MLflow."""
    fake = tmp_path / "fake"
    (fake / "mlflow").mkdir(parents=True)
    (fake / "mlflow" / "__init__.py").write_text(GATED_MLFLOW)
    gate = tmp_path / "gate"
    env = {
        **os.environ,
        "PYTHONPATH": f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "AIR_TEST_MLFLOW_GATE": str(gate),
    }
    if home_used_before:
        _store(air_home)  # the store exists, as after any earlier job on this home
    else:
        _store(tmp_path / "another-home")  # this machine's template store exists
        assert not (air_home / "mlflow.db").exists()
    job = "import os; print('run', os.environ['MLFLOW_RUN_ID'], flush=True)"
    argv = [AIR, "launch", "--json", "--experiment", "never-seen", "--name", "first-trial"]
    argv += ["--set", "lr=0.1", "--", sys.executable, "-I", "-c", job]
    try:
        launched = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert launched.returncode == 0, launched.stderr
        job_id = json.loads(launched.stdout)["job_id"]
        log = air_home / "jobs" / job_id / "output.log"
        line = wait_until(lambda: log.exists() and log.read_text().strip(), timeout_s=60)
        run_id = line.split()[-1]
        db = sqlite3.connect(f"file:{air_home / 'mlflow.db'}?mode=ro", uri=True)
        row = db.execute(
            "SELECT r.name, r.status, e.name FROM runs r JOIN experiments e"
            " ON e.experiment_id = r.experiment_id WHERE r.run_uuid = ?",
            (run_id,),
        ).fetchone()
        assert row == ("first-trial", "RUNNING", "never-seen")
    finally:
        gate.write_text("open")
    client = Client(air_home)
    (info,) = client.wait([job_id], timeout_s=180)
    assert info.status == JobStatus.SUCCEEDED and info.run_id == run_id, info.message
    run = client.tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1"}
    assert run.data.tags["air.job_id"] == job_id and "air.spare" not in run.data.tags
