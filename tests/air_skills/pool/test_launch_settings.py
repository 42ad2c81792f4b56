"""Settings belong to the launch, not to a lingering process (issue 38.7): a job launched with
AIR_SIMULATED_GPUS=2 and handed to an idle supervisor started from a shell without it runs on
a simulated GPU; nothing is cordoned "missing: NVML". Real processes, real store."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus

LAUNCH = (
    "from air_skills import Client, JobSpec; c = Client();"
    " j = c.launch(JobSpec(command=['true'], track=False)).job_id;"
    " print(c.wait([j], timeout_s=60)[0].status)"
)


def idle_supervisors(home: Path) -> int:
    conn = sqlite3.connect(home / "air.db")
    try:
        return conn.execute("SELECT count(*) FROM idle_supervisors").fetchone()[0]
    finally:
        conn.close()


def test_a_job_runs_with_its_launchs_gpus_not_the_idle_supervisors(
    air_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "60")  # the first job's supervisor lingers
    bare = {k: v for k, v in os.environ.items() if k != "AIR_SIMULATED_GPUS"}
    first = subprocess.run([sys.executable, "-c", LAUNCH], env=bare, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert first.stdout.strip() == "SUCCEEDED", first.stderr
    wait_until(lambda: idle_supervisors(air_home) > 0, timeout_s=30)
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "2")
    client = Client(air_home)
    job = client.launch(JobSpec(command=["true"], gpus=1, track=False)).job_id
    info = client.wait([job], timeout_s=60)[0]
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert info.attempts == 1, info.message  # no preflight failure, no requeue
    assert not [g for g in client.gpus() if g.cordoned], client.gpus()


def test_a_queued_job_starts_without_a_launch_or_an_exit(
    air_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills.runtime.store.store import Store

    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "60")
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    client = Client(air_home)
    first = client.launch(JobSpec(command=["true"], track=False)).job_id
    assert client.wait([first], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    wait_until(lambda: idle_supervisors(air_home) > 0, timeout_s=30)
    client.cordon(0, reason="test")
    job = client.launch(JobSpec(command=["true"], gpus=1, track=False)).job_id
    assert client.get(job).status == JobStatus.QUEUED
    store = Store(air_home)
    try:
        store.uncordon(0)  # the store alone: no pass runs with it (as a GPU freed elsewhere)
    finally:
        store.close()
    # the idle supervisor's timer pass starts it (PASS_EVERY_S), with no launch or exit
    wait_until(lambda: client.get(job).status.is_terminal(), timeout_s=60)
    assert client.get(job).status == JobStatus.SUCCEEDED
