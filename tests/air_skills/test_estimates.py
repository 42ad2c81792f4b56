"""Learned run-time estimates: job classes, the estimate, its use by the scheduler, age limit."""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime import estimates
from air_skills.runtime.estimates import class_estimates, estimate, job_class
from air_skills.runtime.scheduler import Inventory, QueuedJob, RunningJob, schedule
from air_skills.runtime.store import Store, new_job_id

PY = sys.executable

BASE = {
    "command": ["python", "train.py"],
    "workdir": "/w",
    "experiment": "e",
    "tags": {"autoresearch.study": "s", "autoresearch.trial": "1"},
    "gpus": 1,
    "config": {"lr": 0.1},
    "name": "a",
}


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ({"config": {"lr": 0.2}}, True),  # trials of one study differ by config only
        ({"name": "b"}, True),
        ({"tags": {"autoresearch.study": "s", "autoresearch.trial": "2"}}, True),
        ({"timeout_min": 5}, True),
        ({"command": ["python", "eval.py"]}, False),
        ({"workdir": "/other"}, False),
        ({"experiment": "f"}, False),
        ({"tags": {"autoresearch.study": "t"}}, False),
        ({"gpus": 2}, False),
    ],
)
def test_job_class(change: dict[str, object], same: bool) -> None:
    assert (job_class(BASE) == job_class({**BASE, **change})) is same


@pytest.mark.parametrize(
    ("durations", "expected"),
    [
        ([], None),
        ([10.0], None),
        ([10.0, 12.0], None),  # fewer than MIN_SAMPLES
        ([10.0, 12.0, 30.0], 12.0 * estimates.SAFETY),  # the median: one outlier counts little
        ([10.0, 20.0, 30.0, 40.0], 25.0 * estimates.SAFETY),
    ],
)
def test_estimate(durations: list[float], expected: float | None) -> None:
    assert estimates.MIN_SAMPLES == 3
    assert estimate(durations) == expected


GPUS4 = Inventory(gpus=(0, 1, 2, 3), cpu_slots=2, starvation_s=30)


@pytest.mark.parametrize(
    ("case", "now", "small", "running", "starts"),
    [
        # A guess that ends before the head's start backfills while the head is young...
        ("young head, guess fits", 10, {"duration_est_s": 50, "learned": True}, {}, True),
        # ...but never once the head has waited its age limit (a guess is no limit).
        ("aged head, guess fits", 40, {"duration_est_s": 50, "learned": True}, {}, False),
        # A user's time limit still backfills past an aged head (EASY, as before).
        ("aged head, time limit fits", 40, {"duration_est_s": 50}, {}, True),
        ("young head, guess too long", 10, {"duration_est_s": 500, "learned": True}, {}, False),
        ("young head, no estimate", 10, {}, {}, False),
        # A running job's guessed end is a shadow time too: the head reserves at once.
        (
            "guessed running end",
            10,
            {"duration_est_s": 50, "learned": True},
            {"expected_end": 100.0, "end_guessed": True},
            True,
        ),
        # A running job past its guess: the head may start any moment, nothing backfills.
        (
            "overdue guess",
            200,
            {"duration_est_s": 1, "learned": True},
            {"expected_end": 100.0, "end_guessed": True},
            False,
        ),
    ],
)
def test_scheduler_with_learned_estimates(
    case: str, now: float, small: dict[str, object], running: dict[str, object], starts: bool
) -> None:
    run = RunningJob("run", (0, 1, 2), 1, False, 0.0, **{"expected_end": 100.0, **running})  # type: ignore[arg-type]
    queued = [
        QueuedJob("big", 4, 1, 1, 0.0),
        QueuedJob("small", 1, 1, 2, 0.0, **small),  # type: ignore[arg-type]
    ]
    d = schedule(queued, [run], GPUS4, now)
    assert [s.job_id for s in d.starts] == (["small"] if starts else []), case
    assert "big" in d.reasons


def _finished(store: Store, spec: dict[str, object], seconds: float, status: JobStatus) -> str:
    job_id = new_job_id()
    store.queue(spec, job_id, "/dev/null", "t", project="default")
    with store.tx() as c:
        assert store.mark_running(c, job_id, [0], 1, False)
    assert store.finish(job_id, status, message=status.value)
    with store.tx() as c:  # the attempt's length, as if it had run that long
        c.execute("UPDATE jobs SET started_at = ended_at - ? WHERE job_id=?", (seconds, job_id))
    return job_id


def test_class_estimates_from_successes_only(tmp_path: Path) -> None:
    store = Store(tmp_path)
    other = {**BASE, "command": ["python", "eval.py"]}
    for s in (10.0, 11.0, 12.0):
        _finished(store, BASE, s, JobStatus.SUCCEEDED)
    for s in (1000.0, 2000.0, 3000.0):  # failures say nothing about a successful run's length
        _finished(store, BASE, s, JobStatus.FAILED)
    for s in (5.0, 6.0):  # too few successes
        _finished(store, other, s, JobStatus.SUCCEEDED)
    with store.tx() as c:
        got = class_estimates(c, [job_class(BASE), job_class(other), "unknown", ""])
        plan = " ".join(
            str(r[-1])
            for r in c.execute(
                "EXPLAIN QUERY PLAN SELECT job_class FROM jobs INDEXED BY jobs_class_done"
                " WHERE job_class=? AND status='SUCCEEDED' ORDER BY ended_at DESC LIMIT 20",
                ("x",),
            )
        )
    assert got == {job_class(BASE): pytest.approx(11.0 * estimates.SAFETY)}
    assert "jobs_class_done" in plan and "TEMP B-TREE" not in plan  # no sort, no scan


def test_latest_successes_count(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for _ in range(estimates.RECENT):
        _finished(store, BASE, 100.0, JobStatus.SUCCEEDED)
        time.sleep(0.001)  # distinct end times: the latest are the last ones
    for _ in range(estimates.RECENT):
        _finished(store, BASE, 10.0, JobStatus.SUCCEEDED)
        time.sleep(0.001)
    with store.tx() as c:
        assert class_estimates(c, [job_class(BASE)]) == {
            job_class(BASE): pytest.approx(10.0 * estimates.SAFETY)
        }


def test_older_home_gains_the_class_column(tmp_path: Path) -> None:
    """A home from before learned estimates: the column and its index are added on open."""
    Store(tmp_path).conn.close()
    db = sqlite3.connect(tmp_path / "air.db")
    db.execute("DROP INDEX jobs_class_done")
    db.execute("ALTER TABLE jobs DROP COLUMN job_class")
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    store = Store(tmp_path)
    _finished(store, BASE, 1.0, JobStatus.SUCCEEDED)
    names = {r[1] for r in store.conn.execute("PRAGMA table_info(jobs)")}
    indexes = {r[1] for r in store.conn.execute("PRAGMA index_list(jobs)")}
    assert "job_class" in names and "jobs_class_done" in indexes


# A job whose length is its config's "s": one class (same command), any duration.
SLEEPER = "import json, os, time; time.sleep(json.load(open(os.environ['AIR_CONFIG_FILE']))['s'])"


def test_learned_estimates_never_delay_a_job_past_its_age_limit(
    client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Real processes on 2 simulated GPUs: a job with a learned estimate backfills ahead of a
    blocked 2-GPU job while that one is young, never once it has waited AIR_STARVATION_S."""
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "2")
    monkeypatch.setenv("AIR_STARVATION_S", "1.5")

    def guessed(s: float) -> str:
        spec = JobSpec(command=[PY, "-c", SLEEPER], config={"s": s}, gpus=1, track=False)
        return client.launch(spec).job_id

    history = [guessed(0.1) for _ in range(estimates.MIN_SAMPLES)]
    infos = client.wait(history, timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * len(history)

    # 1 GPU held until at most 9 s from now (a time limit); the 2-GPU head must wait for it.
    limit = client.launch(
        JobSpec(command=["sleep", "6"], gpus=1, timeout_min=0.15, track=False)
    ).job_id
    head = client.launch(JobSpec(command=["sleep", "0.5"], gpus=2, track=False)).job_id
    young = guessed(0.1)  # ends long before the head can start: backfills on its GPU
    assert client.wait([young], timeout_s=30)[0].status == JobStatus.SUCCEEDED
    assert client.get(head).status == JobStatus.QUEUED

    time.sleep(2.0)  # the head is now past its age limit
    late = guessed(0.1)  # fits before the head's start as well, but only by a guess
    infos = client.wait([limit, head, late], timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * 3, [i.message for i in infos]
    store = Store(client.home)
    rows = {j: store.row(j) for j in (limit, head, young, late)}
    assert rows[young]["started_at"] < rows[head]["started_at"]
    assert rows[late]["started_at"] >= rows[head]["started_at"], "a guess overtook an aged head"
    assert rows[late]["created_at"] - rows[head]["created_at"] > 1.5
