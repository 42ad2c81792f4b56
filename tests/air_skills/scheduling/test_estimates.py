"""Learned run-time estimates: job classes, the estimate, its use by the scheduler, age limit."""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

import pytest
from helpers import GATED, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.scheduling.scheduler import Inventory, QueuedJob, RunningJob, schedule
from air_skills.runtime.store import estimates
from air_skills.runtime.store.estimates import class_estimates, estimate, job_class, with_prior
from air_skills.runtime.store.store import Store, new_job_id

PY = sys.executable

BASE = {
    "command": ["python", "train.py"],
    "workdir": "/w",
    "experiment": "e",
    "tags": {"autoresearch.study.study": "s", "autoresearch.trial": "1"},
    "gpus": 1,
    "config": {"lr": 0.1},
    "name": "a",
}


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ({"config": {"lr": 0.2}}, True),  # trials of one study differ by config only
        ({"name": "b"}, True),
        ({"tags": {"autoresearch.study.study": "s", "autoresearch.trial": "2"}}, True),
        ({"timeout_min": 5}, True),
        ({"command": ["python", "eval.py"]}, False),
        ({"workdir": "/other"}, False),
        ({"experiment": "f"}, False),
        ({"tags": {"autoresearch.study.study": "t"}}, False),
        ({"gpus": 2}, False),
    ],
)
def test_job_class(change: dict[str, object], same: bool) -> None:
    assert (job_class(BASE) == job_class({**BASE, **change})) is same


@pytest.mark.parametrize(
    ("durations", "expected"),
    [
        ([], None),
        ([10.0], 10.0 * estimates.SAFETY_ONE),  # one success: a wider margin
        ([10.0, 12.0], 11.0 * estimates.SAFETY),
        ([10.0, 12.0, 30.0], 12.0 * estimates.SAFETY),  # the median: one outlier counts little
        ([10.0, 20.0, 30.0, 40.0], 25.0 * estimates.SAFETY),
    ],
)
def test_estimate(durations: list[float], expected: float | None) -> None:
    assert estimates.SAFETY_ONE > estimates.SAFETY
    assert estimate(durations) == pytest.approx(expected)


def test_prior_for_a_class_without_history() -> None:
    known = {"a": 10.0, "b": 20.0, "c": 90.0}
    got = with_prior(known, ["a", "new", "", "b", "other"])
    prior = 20.0 * estimates.PRIOR_SAFETY  # the median of the known estimates, widened
    assert got == {**known, "new": prior, "other": prior}  # known ones kept; "" is no class
    assert with_prior({}, ["new"]) == {}  # nothing known (a fresh home): no guess at all


GPUS4 = Inventory(gpus=(0, 1, 2, 3), cpu_slots=2, starvation_s=30)


@pytest.mark.parametrize(
    ("case", "now", "small", "running", "starts"),
    [
        # A guess that ends before the head's start backfills while the head is young...
        ("young head, guess fits", 10, {"duration_est_s": 50, "learned": True}, {}, True),
        # ...and past an aged head too, while no running job is past its guessed end.
        ("aged head, guess fits", 40, {"duration_est_s": 50, "learned": True}, {}, True),
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


@pytest.mark.parametrize(("queued_at", "starts"), [(0.0, False), (20.0, True)])
def test_no_guess_passes_an_aged_head_while_a_guess_is_overdue(
    queued_at: float, starts: bool
) -> None:
    """A running job past its guessed end: guesses are failing, so none may pass a head that
    has waited its age limit (queued at 0, now 40), though one may still pass a young head."""
    running = [
        RunningJob("limit", (0, 1), 1, False, 0.0, expected_end=100.0),  # a time limit
        RunningJob("late", (2,), 1, False, 0.0, expected_end=30.0, end_guessed=True),
    ]
    queued = [
        QueuedJob("big", 4, 1, 1, queued_at),
        QueuedJob("small", 1, 1, 2, 0.0, duration_est_s=50, learned=True),  # ends by 90 < 100
    ]
    d = schedule(queued, running, GPUS4, now=40.0)
    assert [s.job_id for s in d.starts] == (["small"] if starts else [])


def test_overrunning_guesses_delay_an_aged_head_by_one_overrun_only() -> None:
    """Virtual clock, 8 GPUs: a 7-GPU job with a time limit ends at 100; an 8-GPU head is
    queued at 0; a stream of 1-GPU jobs (one every 5 s) is guessed at 20 s but runs 40 s.
    Guessed jobs pass the head on the free GPU only while none runs past its guess, so the
    head starts at 100 plus at most one job's overrun (20 s), and the stream cannot starve it."""
    inv = Inventory(gpus=tuple(range(8)), cpu_slots=2, starvation_s=30)
    running = {"limit": RunningJob("limit", tuple(range(7)), 1, False, 0.0, expected_end=100.0)}
    ends = {"limit": 100.0}
    queued = {"big": QueuedJob("big", 8, 1, 0, 0.0)}
    overtakers = 0
    t, i = 0.0, 0
    while t <= 1000:
        for job_id in [j for j, e in ends.items() if e <= t]:
            del running[job_id], ends[job_id]
        i += 1
        queued[f"s{i}"] = QueuedJob(f"s{i}", 1, 1, i, t, duration_est_s=20.0, learned=True)
        decision = schedule(list(queued.values()), list(running.values()), inv, now=t)
        if "big" in [s.job_id for s in decision.starts]:
            break
        for s in decision.starts:
            overtakers += 1
            del queued[s.job_id]
            running[s.job_id] = RunningJob(
                s.job_id, s.gpus, 1, False, t, expected_end=t + 20.0, end_guessed=True
            )
            ends[s.job_id] = t + 40.0
        t += 5.0
    assert 100.0 <= t <= 100.0 + 20.0, t
    assert overtakers == 3  # at 0, 40 and 80: each once the one before had ended


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
    for s in (5.0, 6.0):  # failures only: no success to learn from
        _finished(store, other, s, JobStatus.FAILED)
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


# A job whose length is its config's "s", or, with "gate", until its gate file is written (each a
# class of its own: same command, any duration).
SLEEPER = (
    "import json, os, time\n"
    "cfg = json.load(open(os.environ['AIR_CONFIG_FILE']))\n"
    "gate = os.path.join(os.path.dirname(os.environ['AIR_CONFIG_FILE']), 'gate')\n"
    "deadline = time.monotonic() + (120 if cfg.get('gate') else cfg['s'])\n"
    "while time.monotonic() < deadline and not (cfg.get('gate') and os.path.exists(gate)):\n"
    "    time.sleep(0.05 if cfg.get('gate') else max(0, deadline - time.monotonic()))\n"
)


def test_learned_estimates_never_delay_a_job_past_its_age_limit(
    client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Real processes on 2 simulated GPUs. A job whose guessed end is before a blocked 2-GPU
    job's start backfills ahead of it; when that guess is overrun, no other guessed job passes
    the blocked one once it has waited AIR_STARVATION_S: it waits for the jobs already running
    (one overrun), never for a stream of later guesses. The jobs that hold GPUs end when the
    test opens their gates, so the order of events does not depend on the machine's speed."""
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "2")
    monkeypatch.setenv("AIR_STARVATION_S", "1.5")
    store = Store(client.home)

    def guessed(config: dict[str, object]) -> str:
        spec = JobSpec(command=[PY, "-c", SLEEPER], config=config, gpus=1, track=False)
        return client.launch(spec).job_id

    def open_gate(job_id: str) -> None:
        (client.home / "jobs" / job_id / "gate").write_text("")

    history = [guessed({"s": 0.1}) for _ in range(3)]
    infos = client.wait(history, timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * len(history)
    with store.tx() as c:
        guess = class_estimates(c, [store.row(history[0]).job_class])
    assert len(guess) == 1  # the class has its own estimate: well under a second or two
    guess_s = next(iter(guess.values()))

    # 1 GPU held until its gate opens, with a time limit; the 2-GPU head must wait for it.
    limit = client.launch(
        JobSpec(command=[PY, "-c", GATED], gpus=1, timeout_min=1, track=False)
    ).job_id
    head = client.launch(JobSpec(command=["sleep", "0.5"], gpus=2, track=False)).job_id
    over = guessed({"gate": True})  # guessed to end long before the head's start: passes it
    wait_until(lambda: client.get(over).status == JobStatus.RUNNING, timeout_s=30)
    assert client.get(head).status == JobStatus.QUEUED
    # The head past its age limit and `over` past its guess: a later guess must not pass.
    wait_until(lambda: time.time() - store.row(head).created_at > 2.0, timeout_s=30)
    wait_until(lambda: time.time() - store.row(over).started_at > guess_s, timeout_s=30)
    late = guessed({"s": 0.1})
    open_gate(limit)  # one GPU free: held for the head, not given to `late`
    wait_until(lambda: client.get(limit).status.is_terminal(), timeout_s=60)
    # A launch runs a scheduling pass: one pass at least has seen the freed GPU.
    client.launch(JobSpec(command=["true"], gpus=0, track=False))
    assert client.get(late).status == JobStatus.QUEUED, client.get(late).message
    assert client.get(head).status == JobStatus.QUEUED, client.get(head).message
    open_gate(over)
    infos = client.wait([limit, head, over, late], timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * 4, [i.message for i in infos]
    rows = {j: store.row(j) for j in (limit, head, over, late)}
    assert rows[over].started_at < rows[head].started_at <= rows[late].started_at
    assert rows[late].created_at - rows[head].created_at > 1.5
    assert rows[over].started_at + guess_s < rows[late].created_at
    assert rows[late].created_at < rows[limit].ended_at < rows[over].ended_at
    # The head waited for the jobs running when it aged, nothing more: it started at once
    # after `over`, the last of them, ended (its GPUs were held for it).
    assert rows[head].started_at >= rows[over].ended_at
