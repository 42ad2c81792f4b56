"""Issue 30: a FIFO in a job's folder never wedges the pool: every read of a job-folder file is
non-blocking and refuses what is not a regular file; reconcile settles a lost job whatever its
folder holds, and the GPU it frees goes to the queue at once."""

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
from air_skills.errors import InvalidState
from air_skills.home import read_job_env, read_launch_env
from air_skills.runtime.process import proc

PY = sys.executable
AIR = str(Path(PY).with_name("air"))
HOLD = "import time; time.sleep(600)"
# Each file a reader of the folder opens: what the supervisor, reconcile and `air` read.
FOLDER_FILES = (
    "config.json",
    "record.json",
    "env.json",
    "job_env.json",
    "run_plan.json",
    "code.json",
    "container.json",
    "output.log",
    "hardware.json",
)


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _air(*args: str) -> subprocess.CompletedProcess[str]:
    # The bound turns the hang this test guards against into a failure; it is no speed check.
    return subprocess.run([AIR, *args], capture_output=True, text=True, timeout=60, env=os.environ)


@pytest.fixture
def one_gpu(air_home: Path, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    return Client(air_home)


def test_the_one_reader_refuses_a_fifo_a_link_and_an_oversized_file(tmp_path: Path) -> None:
    from air_skills.home import NotRegularFile, read_job_file

    _fifo(tmp_path / "env.json")
    with pytest.raises(NotRegularFile, match="FIFO"):
        read_job_file(tmp_path / "env.json")
    assert read_launch_env(tmp_path) is None  # refused at once, not waited on
    (tmp_path / "job_env.json").symlink_to("/dev/zero")
    with pytest.raises(OSError):
        read_job_file(tmp_path / "job_env.json")
    assert read_job_env(tmp_path) is None
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(NotRegularFile, match="over 100 bytes"):
        read_job_file(tmp_path / "big", max_bytes=100)
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert read_job_file(tmp_path / "ok.json") == b'{"a": 1}'


def test_a_queued_job_whose_config_is_a_fifo_fails_at_start_and_the_queue_moves_on(
    one_gpu: Client, air_home: Path
) -> None:
    client = one_gpu
    holder = client.launch(JobSpec(command=[PY, "-c", HOLD], gpus=1, track=False))
    wait_until(lambda: client.get(holder.job_id).status == JobStatus.RUNNING, 60)
    cfg = "import json, os; print(json.load(open(os.environ['AIR_CONFIG_FILE'])))"
    spec = JobSpec(command=[PY, "-c", cfg], gpus=1, config={"lr": 0.1}, track=False)
    wedged = client.launch(spec)
    logless = client.launch(JobSpec(command=[PY, "-c", "print('lost')"], gpus=1, track=False))
    after = client.launch(JobSpec(command=[PY, "-c", "print('next')"], gpus=1, track=False))
    assert client.get(wedged.job_id).status == JobStatus.QUEUED
    _fifo(air_home / "jobs" / wedged.job_id / "config.json")
    _fifo(air_home / "jobs" / logless.job_id / "output.log")  # written to, not read
    _fifo(air_home / "jobs" / logless.job_id / "supervisor.log")
    client.cancel(holder.job_id)  # the GPU goes to the jobs with the FIFOs, one by one
    done = client.wait([wedged.job_id, logless.job_id, after.job_id], timeout_s=60, any=False)
    by_id = {i.job_id: i for i in done}
    for job_id, name in ((wedged.job_id, "config.json"), (logless.job_id, "output.log")):
        assert by_id[job_id].status == JobStatus.FAILED, (name, by_id[job_id])
        assert name in by_id[job_id].message, by_id[job_id].message
    assert by_id[after.job_id].status == JobStatus.SUCCEEDED  # the queue moved on


def test_a_lost_supervisor_with_fifos_in_its_folder_is_settled_and_frees_its_gpu(
    one_gpu: Client, air_home: Path
) -> None:
    client = one_gpu
    lost = client.launch(JobSpec(command=[PY, "-c", HOLD], gpus=1, config={"a": 1}))
    row = wait_until(lambda: (r := client.store.row(lost.job_id)).job_pid and r, 60)
    queued = client.launch(JobSpec(command=[PY, "-c", "print('next')"], gpus=1, track=False))
    jdir = air_home / "jobs" / lost.job_id
    for name in FOLDER_FILES:
        _fifo(jdir / name)
    os.kill(row.supervisor_pid, signal.SIGKILL)
    proc.kill_group(row.job_pid)
    wait_until(lambda: not proc.alive(row.supervisor_pid, row.supervisor_start), 30)
    listed = _air("ls", "--json")  # reconciles: settles the lost job, starts the queued one
    assert listed.returncode == 0, listed.stderr
    seen = {j["job_id"]: j for j in json.loads(listed.stdout)}[lost.job_id]
    assert seen["status"] != "RUNNING" or seen["attempts"] == 2, seen  # settled: a retry
    # The retry refuses the FIFO in its config's place; the queue then moves on.
    ended = client.wait([lost.job_id], timeout_s=60)[0]
    assert ended.status == JobStatus.FAILED and "config.json" in ended.message, ended
    assert client.wait([queued.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    shown = _air("logs", lost.job_id, "--json")  # its log is a FIFO: refused, not waited on
    assert shown.returncode == 1 and '"unsafe-job-file"' in shown.stdout, shown
    grep = _air("logs", lost.job_id, "--grep", "x", "--json")
    assert grep.returncode == 1 and '"unsafe-job-file"' in grep.stdout, grep
    with pytest.raises(InvalidState):
        client.logs(lost.job_id)


def test_a_garbled_record_in_a_lost_jobs_folder_does_not_stop_the_reconcile(
    air_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_MAX_INFRA_RETRIES", "0")
    client = Client(air_home)
    lost = [client.launch(JobSpec(command=[PY, "-c", HOLD], gpus=1, track=False)) for _ in "ab"]
    rows = [
        wait_until(lambda i=i: (r := client.store.row(i.job_id)).job_pid and r, 60) for i in lost
    ]
    (air_home / "jobs" / lost[0].job_id / "container.json").write_text('["not", "a", "record"]')
    (air_home / "jobs" / lost[1].job_id / "container.json").write_text('{"engine": "podman"}')
    for row in rows:
        os.kill(row.supervisor_pid, signal.SIGKILL)
        proc.kill_group(row.job_pid)
        wait_until(lambda r=row: not proc.alive(r.supervisor_pid, r.supervisor_start), 30)
    listed = _air("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    status = {j["job_id"]: j["status"] for j in json.loads(listed.stdout)}
    assert [status[i.job_id] for i in lost] == ["FAILED", "FAILED"], status


def test_cancel_ends_a_running_job_whose_folder_files_became_fifos(
    one_gpu: Client, air_home: Path
) -> None:
    client = one_gpu
    info = client.launch(JobSpec(command=[PY, "-c", HOLD], gpus=1, config={"a": 1}))
    row = wait_until(lambda: (r := client.store.row(info.job_id)).job_pid and r, 60)
    jdir = air_home / "jobs" / info.job_id
    for name in FOLDER_FILES:  # what the supervisor reads as it ends the job
        _fifo(jdir / name)
    cancelled = _air("cancel", info.job_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] == "CANCELLED", cancelled.stdout
    assert not proc.alive(row.supervisor_pid, row.supervisor_start) or wait_until(
        lambda: not proc.alive(row.supervisor_pid, row.supervisor_start), 30
    )
