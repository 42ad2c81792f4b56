"""Idle supervisors and MLflow: a tracked job goes to one that has MLflow loaded, and an idle
one without it loads it after a while (supervision/idle.py), so that a tracked job's run and a
sandboxed job's metric relay do not wait seconds for the import."""

from __future__ import annotations

import sys

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.store.store import Store

PY = sys.executable


def idle_rows(client: Client) -> list[tuple[int, int]]:
    return [
        (r["pid"], r["tracking"])
        for r in client.store.conn.execute("SELECT pid, tracking FROM idle_supervisors")
    ]


def test_a_tracked_job_is_handed_to_an_idle_supervisor_with_mlflow_loaded(
    client: Client,
) -> None:
    store: Store = client.store
    store.add_idle(1001, "a", 10, tracking=False)
    store.add_idle(1002, "b", 10, tracking=True)
    store.add_idle(1003, "c", 10, tracking=False)  # the most recently idle
    assert store.idle_tracking() == 1

    def claim(tracked: bool) -> int | None:
        with store.tx() as c:
            got = store.claim_idle(c, lambda pid, start: True, tracked=tracked)
        return got[0] if got else None

    assert claim(tracked=True) == 1002  # MLflow loaded first, however long it has waited
    assert claim(tracked=False) == 1003  # without: the most recently idle, as before
    assert claim(tracked=True) == 1001  # none loaded left: any idle one beats a new process
    assert claim(tracked=False) is None


def test_an_idle_supervisor_loads_mlflow_and_takes_the_next_tracked_job(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "600")
    first = client.launch(JobSpec(command=[PY, "-c", "pass"], track=False, gpus=0))
    assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    sup = client.store.row(first.job_id).supervisor_pid
    # Idle without MLflow (its job had no run), it steps off the list while MLflow loads and
    # comes back with it loaded.
    wait_until(lambda: (sup, 1) in idle_rows(client), timeout_s=300)
    tracked = client.launch(JobSpec(command=[PY, "-c", "pass"], gpus=0))
    assert client.store.row(tracked.job_id).supervisor_pid == sup
    assert client.wait([tracked.job_id], timeout_s=120)[0].status == JobStatus.SUCCEEDED
