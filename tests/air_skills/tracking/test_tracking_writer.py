"""The home's tracking writer (tracking/writer.py, runtime/runs/tracking_writer.py): MLflow
stays out of supervisors, and a writer killed in the middle of a batch loses no metric point."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from air_skills import Client
from air_skills.tracking import writer
from air_skills.tracking.mlflow import MlflowTracker, tracking_uri

PY = sys.executable


def _requests(home: Path) -> list[Path]:
    return sorted(p for p in writer.spool(home).iterdir() if p.name.startswith("req-"))


def test_a_writer_killed_mid_batch_loses_no_point(client: Client) -> None:
    """100 batches of 200 points queued; the writer is killed (SIGKILL) once some are done
    and others are not; the caller waiting for the last one starts a new writer, and MLflow
    then holds every point exactly once."""
    home = client.home
    uri = tracking_uri(home)
    run_id, _ = MlflowTracker(home, uri).create_run(
        job_id="job-0000000000", name="w", experiment="writer", config={}, tags={}
    )
    batches, per = 100, 200
    rids = []
    for b in range(batches):
        points = [("loss", float(b * per + i), 1_000 + b, b * per + i) for i in range(per)]
        rids.append(writer.submit(home, uri, "log_metrics", run_id, [list(p) for p in points]))
    writer.ensure_writer(home)
    deadline = time.monotonic() + 240
    while len(_requests(home)) == batches:  # until the writer has done some
        assert time.monotonic() < deadline, "the writer never started"
        time.sleep(0.01)
    pid = int((writer.spool(home) / writer.PID).read_text())
    os.kill(pid, signal.SIGKILL)
    left = len(_requests(home))
    assert 0 < left < batches, left  # killed in the middle of the spool
    writer.wait(home, rids[-1])  # starts a new writer: the one that had the lock is dead
    for rid in rids[:-1]:
        writer.wait(home, rid)
    assert _requests(home) == []
    db = sqlite3.connect(home / "mlflow.db")
    rows = db.execute(
        "SELECT step, value FROM metrics WHERE run_uuid=? AND key='loss'", (run_id,)
    ).fetchall()
    db.close()
    assert len(rows) == batches * per  # none lost, none twice
    assert sorted(s for s, _ in rows) == list(range(batches * per))
    assert all(float(s) == v for s, v in rows)


def _pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_supervisors_keep_mlflow_out(client: Client, tmp_path: Path, sandbox: str) -> None:
    """A tracked job's supervisor never loads MLflow (its writes go to the home's writer): its
    PSS stays under 40 MB; the run still gets its params, metrics (a sandboxed job's through
    the relay), summary values, hardware tags and its end."""
    code = (
        "import mlflow, time\n"
        "with mlflow.start_run():\n"
        "    [mlflow.log_metric('loss', 1.0 / (s + 1), step=s) for s in range(5)]\n"
        "    mlflow.log_param('p', 3)\n"
        "marker = __import__('os').environ['AIR_CHECKPOINT_DIR'] + '/go'\n"
        "open(marker, 'w').close()\n"
        "time.sleep(3)\n"
        "print('---'); print('acc: 0.9')\n"
    )
    info = client.launch(
        {"command": [PY, "-c", code], "gpus": 1, "sandbox": sandbox, "config": {"lr": 0.1}}
    )
    deadline = time.monotonic() + 240
    while True:
        row = client.store.row(info.job_id)
        assert row is not None
        if (
            row.status == "RUNNING"
            and row.supervisor_pid
            and any((client.home / "jobs" / info.job_id).rglob("go"))
        ):
            break
        assert row.status in ("QUEUED", "RUNNING"), row.message
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = row.supervisor_pid
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "sqlalchemy" not in maps and "pandas" not in maps
    assert _pss_kb(pid) < 40 * 1024
    done = client.wait([info.job_id], timeout_s=240)[0]
    assert done.status.value == "SUCCEEDED", done.message
    run = client.tracker.client.get_run(done.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {"loss": 0.2, "acc": 0.9}
    assert run.data.params == {"lr": "0.1", "p": "3"}
    assert any(k.startswith("air.hardware") for k in run.data.tags)


def test_writes_queued_without_waiting_are_applied_and_leave_no_reply(client: Client) -> None:
    """RemoteTracker(wait=False) (a Slurm launch hands its run's completion on after sbatch):
    each write is queued and the caller goes on; the writer it starts applies them in order
    and writes no reply nobody would read."""
    home = client.home
    uri = tracking_uri(home)
    run_id, _ = MlflowTracker(home, uri).create_run(
        job_id="job-0000000001", name="spare", experiment="queued", config={}, tags={}
    )
    queued = writer.RemoteTracker(home, uri, wait=False)
    assert queued.fill_run(run_id, name="filled", config={"lr": 0.1}, tags={"k": "v"}) is None
    queued.set_tags(run_id, {"after": "fill"})
    deadline = time.monotonic() + 240
    while _requests(home):  # no caller waits: the writer was started by the queueing
        assert time.monotonic() < deadline, "the queued writes were never applied"
        time.sleep(0.05)
    run = MlflowTracker(home, uri).client.get_run(run_id)
    assert run.info.run_name == "filled" and run.data.params["lr"] == "0.1"
    assert run.data.tags["k"] == "v" and run.data.tags["after"] == "fill"
    assert not [p for p in writer.spool(home).iterdir() if p.name.startswith("res-")]


def test_a_jobs_end_leaves_the_homes_writer_running(client: Client) -> None:
    """A supervisor (a subreaper) sweeps what its job left behind, but not the home's writer
    that it started: the writer that served the job's start still runs once the job is
    cancelled, and it ended the job's run KILLED (no second writer had to import MLflow)."""
    info = client.launch({"command": [PY, "-c", "import time; time.sleep(120)"], "gpus": 0})
    home = client.home
    deadline = time.monotonic() + 240
    while True:  # running, its run completed through the writer
        row = client.store.row(info.job_id)
        assert row is not None and row.status in ("QUEUED", "RUNNING"), row
        pid_file = writer.spool(home) / writer.PID
        if row.status == "RUNNING" and row.job_pid and pid_file.exists():
            if writer.writer_alive(home):
                break
        assert time.monotonic() < deadline, "the job or its writer never started"
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    started = Path(f"/proc/{pid}/stat").read_text().split()[21]
    done = client.cancel(info.job_id)
    assert done.status.value == "CANCELLED", done.message
    assert Path(f"/proc/{pid}/stat").read_text().split()[21] == started  # the same process
    assert int(pid_file.read_text()) == pid
    assert client.tracker.client.get_run(done.run_id).info.status == "KILLED"
