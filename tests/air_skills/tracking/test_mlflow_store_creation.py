"""The sqlite MLflow store survives a kill -9 during its creation, and `air doctor` tells the truth.

Real processes: a subprocess starts creating the store and is killed with SIGKILL in the middle
of MLflow's schema migration (polled: the store being built holds some tables but not all).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.cli.doctor import run_doctor

PY = sys.executable

OUR_OPEN = (
    "from pathlib import Path; import os; from air_skills.tracking.mlflow import MlflowTracker;"
    " MlflowTracker(Path(os.environ['AIR_HOME'])).client"
)
# What every earlier release did: let MLflow migrate the final file in place.
RAW_OPEN = (
    "import os; from mlflow.tracking import MlflowClient;"
    " MlflowClient(tracking_uri='sqlite:///' + os.environ['AIR_HOME'] + '/mlflow.db')"
    ".search_experiments(max_results=1)"
)
MID_MIGRATION_TABLES = 25  # a complete store has ~65 tables; the first ~12 come from create_all


def _tables(path: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.05)
        try:
            query = "SELECT count(*) FROM sqlite_master WHERE type='table'"
            return conn.execute(query).fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0  # locked by the migration, or not a database yet


def kill_mid_creation(home: Path, code: str) -> None:
    """Run ``code`` (which creates the store) and SIGKILL it in the middle of the migration."""
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [PY, "-c", code], env={**os.environ, "AIR_HOME": str(home)}, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail("the store was created before the kill point was seen")
            built = [
                p for p in home.glob("mlflow.db*") if not p.name.endswith(("-journal", "-wal"))
            ]
            if any(_tables(p) >= MID_MIGRATION_TABLES for p in built):
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                return
            time.sleep(0.002)
        pytest.fail("the store creation never reached the kill point")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SIDES = ("-journal", "-wal", "-shm")  # sqlite's files beside a database


@pytest.fixture(autouse=True)
def no_store_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty cache folder: every store here is built by its migrations (the machine's
    template store, tracking/sqlite_store.py, would skip the migration these tests kill)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def mlflow_check(client: Client) -> dict:
    (check,) = [c for c in run_doctor(client)["checks"] if c["name"] == "mlflow"]
    return check


def launch_tracked(client: Client):
    info = client.launch(JobSpec(command=[PY, "-c", "print('ok')"]))
    (done,) = client.wait([info.job_id], timeout_s=120)
    assert done.status == JobStatus.SUCCEEDED, done
    return done


@pytest.mark.slow
def test_kill_during_first_store_creation_leaves_tracking_working(air_home: Path) -> None:
    kill_mid_creation(air_home, OUR_OPEN)
    client = Client(air_home)
    job = launch_tracked(client)
    assert job.run_id, job.message  # tracked: no "tracking unavailable"
    assert client.tracker.client.get_run(job.run_id).info.status == "FINISHED"
    assert mlflow_check(client)["status"] == "ok"
    assert not list(air_home.glob("mlflow.db.building*"))  # the half-built copy is gone


@pytest.mark.slow
def test_half_built_store_without_runs_is_set_aside_and_rebuilt(air_home: Path) -> None:
    kill_mid_creation(air_home, RAW_OPEN)  # a store left half-built in place (older releases)
    client = Client(air_home)
    check = mlflow_check(client)
    assert check["status"] == "fail", check
    assert "half-built" in check["detail"] and "next tracked launch" in check["next"], check
    job = launch_tracked(client)
    assert job.run_id, job.message
    # Kept, never deleted; a kill mid-write may leave a hot journal, moved beside it.
    (aside,) = [p for p in air_home.glob("mlflow.db.broken-*") if not p.name.endswith(SIDES)]
    assert aside.stat().st_size > 0
    assert mlflow_check(Client(air_home))["status"] == "ok"


@pytest.mark.slow
def test_half_built_store_holding_runs_is_kept_and_the_error_says_how_to_recover(
    air_home: Path,
) -> None:
    client = Client(air_home)
    first = launch_tracked(client)
    assert first.run_id
    # What a kill -9 inside a later schema migration leaves behind: an alembic work table.
    conn = sqlite3.connect(air_home / "mlflow.db")
    conn.execute("CREATE TABLE _alembic_tmp_runs (x INTEGER)")
    conn.commit()
    conn.close()

    fresh = Client(air_home)
    check = mlflow_check(fresh)
    assert check["status"] == "fail" and "1 run" in check["detail"], check
    assert "mlflow.db" in check["next"] and "backup" in check["next"], check
    job = launch_tracked(fresh)
    assert job.run_id is None
    assert "half-built" in job.message and "backup" in job.message, job.message
    assert (air_home / "mlflow.db").exists() and not list(air_home.glob("mlflow.db.broken-*"))
