"""One job's trouble stays that job's: its start errors, its environment, its escaped children."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers import GATED, open_gate, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.process import proc
from air_skills.runtime.scheduling import passes
from air_skills.runtime.store.store import Store

PY = sys.executable


def spec(command: list[str], **kw: object) -> JobSpec:
    return JobSpec(command=command, track=False, **kw)  # type: ignore[arg-type]


def test_deleted_queued_job_folder_fails_that_job_only_in_another_jobs_supervisor(
    client: Client, air_home: Path
) -> None:
    """The pass that starts the job runs in the supervisor of the job that made room."""
    blocker = client.launch(spec([PY, "-c", GATED], gpus=4))
    victim = client.launch(spec(["true"], gpus=4))
    after = client.launch(spec(["true"], gpus=1))
    assert victim.status == JobStatus.QUEUED
    shutil.rmtree(air_home / "jobs" / victim.job_id)
    open_gate(air_home / "jobs" / blocker.job_id)
    infos = client.wait([blocker.job_id, victim.job_id, after.job_id], timeout_s=60, any=False)
    by_id = {i.job_id: i for i in infos}
    assert by_id[blocker.job_id].status == JobStatus.SUCCEEDED, by_id[blocker.job_id].message
    assert by_id[victim.job_id].status == JobStatus.FAILED
    assert "folder" in by_id[victim.job_id].message and "gone" in by_id[victim.job_id].message
    # The supervisor that hit the error went on: the next job ran, nothing is left holding GPUs.
    assert by_id[after.job_id].status == JobStatus.SUCCEEDED, by_id[after.job_id].message
    assert all(i.status.is_terminal() for i in client.list().items)


def test_deleted_queued_job_folder_never_escapes_a_clients_pass(
    client: Client, air_home: Path
) -> None:
    """The pass that starts the job runs in a client (`air ls` reconciles and schedules)."""
    store = Store(air_home)
    for idx in range(4):
        store.cordon(idx, "test: hold the queue")
    victim = client.launch(spec(["true"], gpus=1))
    shutil.rmtree(air_home / "jobs" / victim.job_id)
    for idx in range(4):
        store.uncordon(idx)
    passes.schedule_pass(store)  # raised FileNotFoundError, leaving a phantom RUNNING job
    row = store.row(victim.job_id)
    assert row.status == "FAILED" and "gone" in row.message, row
    assert client.list().items[0].status == JobStatus.FAILED


def test_spec_env_cannot_set_reserved_variables(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the job writes its environment to tmp_path
    out = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    info = client.launch(
        spec(
            [PY, "-c", code],
            gpus=1,
            env={
                "CUDA_VISIBLE_DEVICES": "0,1,2,3",
                "CUDA_DEVICE_ORDER": "FASTEST_FIRST",
                "AIR_JOB_ID": "job-0000000000",
                "MLFLOW_RUN_ID": "someone-elses-run",
                "RANK": "3",
                "MASTER_PORT": "1",
                "MY_SETTING": "kept",
            },
        )
    )
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    env = json.loads(out.read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(str(g) for g in done.gpus)
    assert len(done.gpus) == 1
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["AIR_JOB_ID"] == info.job_id
    assert "MLFLOW_RUN_ID" not in env and "RANK" not in env and "MASTER_PORT" not in env
    assert env["MY_SETTING"] == "kept"


def _escaped_child(pidfile: Path) -> tuple[int, str]:
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 30))
    return pid, proc.start_time(pid) or ""


def test_setsid_child_of_a_finished_job_does_not_survive(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unsandboxed: in the sandbox's pid namespace the pid written would not be the host's,
    # and the namespace's end kills an escaped child by construction (test_sandbox_attacks).
    monkeypatch.setenv("AIR_SANDBOX", "off")
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 300 & echo $! > {pidfile}; sleep 0.3; exit 0"
    info = client.launch(spec(["sh", "-c", script], gpus=1))
    pid, start = _escaped_child(pidfile)
    try:
        done = client.wait([info.job_id], timeout_s=60)[0]
        assert done.status == JobStatus.SUCCEEDED, done.message
        wait_until(lambda: not proc.alive(pid, start), 10)
    finally:
        if proc.alive(pid, start):
            proc.kill_group(pid)


def test_setsid_child_of_a_cancelled_job_does_not_survive(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # as above: the pid it writes is the host's
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 300 & echo $! > {pidfile}; sleep 300"
    info = client.launch(spec(["sh", "-c", script], gpus=1))
    pid, start = _escaped_child(pidfile)
    try:
        assert client.cancel(info.job_id, wait_s=30).status == JobStatus.CANCELLED
        wait_until(lambda: not proc.alive(pid, start), 10)
    finally:
        if proc.alive(pid, start):
            proc.kill_group(pid)
