"""The pure scheduler: priority order, preemption choice, backfill without starvation."""

from __future__ import annotations

import math

from air_skills.runtime.scheduling.scheduler import Inventory, QueuedJob, RunningJob, schedule

GPUS8 = Inventory(gpus=tuple(range(8)), cpu_slots=2)


def q(
    job_id: str,
    gpus: int = 1,
    priority: int = 1,
    seq: int = 0,
    queued_at: float = 0.0,
    **kw: object,
) -> QueuedJob:
    return QueuedJob(job_id, gpus, priority, seq, queued_at, **kw)  # type: ignore[arg-type]


def r(
    job_id: str,
    gpus: tuple[int, ...],
    priority: int = 1,
    preemptible: bool = False,
    started_at: float = 0.0,
    **kw: object,
) -> RunningJob:
    return RunningJob(job_id, gpus, priority, preemptible, started_at, **kw)  # type: ignore[arg-type]


def started(decision) -> list[str]:
    return [s.job_id for s in decision.starts]


def test_priority_then_submission_order() -> None:
    inv = Inventory(gpus=(0, 1), cpu_slots=2)
    queued = [
        q("low", priority=0, seq=1),
        q("n2", seq=3),
        q("high", priority=2, seq=4),
        q("n1", seq=2),
    ]
    d = schedule(queued, [], inv, now=0)
    assert started(d) == ["high", "n1"]
    assert "waiting" in d.reasons["n2"] and "waiting" in d.reasons["low"]


def test_no_gpu_given_twice() -> None:
    running = [r("a", (0, 1, 2))]
    queued = [q(f"j{i}", gpus=2, seq=i) for i in range(5)]
    d = schedule(queued, running, GPUS8, now=0)
    used = [g for s in d.starts for g in s.gpus]
    assert len(used) == len(set(used)) and not set(used) & {0, 1, 2}
    assert len(d.starts) == 2  # 5 free GPUs -> two 2-GPU jobs


def test_preempts_lower_priority_preemptible_only() -> None:
    inv = Inventory(gpus=(0, 1), cpu_slots=2)
    running = [
        r("keep", (0,), priority=0, preemptible=False),
        r("victim", (1,), priority=0, preemptible=True),
    ]
    d = schedule([q("urgent", priority=2)], running, inv, now=10)
    assert d.preempts == ["victim"] and d.starts == []
    # Same priority never preempts.
    d = schedule([q("normal", priority=0)], running, inv, now=10)
    assert d.preempts == []


def test_preemption_picks_fewest_cheapest_victims() -> None:
    running = [
        r("old", (0, 1, 2, 3), priority=0, preemptible=True, started_at=1),
        r("young", (4, 5, 6, 7), priority=0, preemptible=True, started_at=5),
    ]
    d = schedule([q("hi", gpus=4, priority=2)], running, GPUS8, now=10)
    assert d.preempts == ["young"]  # the most recent start loses least work


def test_waiting_job_does_not_preempt_twice() -> None:
    inv = Inventory(gpus=(0, 1), cpu_slots=2)
    running = [
        r("v1", (0,), priority=0, preemptible=True, stopping=True),
        r("v2", (1,), priority=0, preemptible=True),
    ]
    d = schedule([q("hi", priority=2)], running, inv, now=1)
    assert d.preempts == [] and d.starts == []


def test_impossible_preemption_preempts_nothing() -> None:
    running = [
        r("a", (0, 1, 2, 3), priority=0, preemptible=False),
        r("b", (4, 5, 6, 7), priority=0, preemptible=True),
    ]
    d = schedule([q("big", gpus=8, priority=2)], running, GPUS8, now=1)
    assert d.preempts == []


def test_backfill_small_jobs_while_head_is_young() -> None:
    running = [r("a", (0, 1, 2, 3, 4, 5))]
    queued = [q("big", gpus=8, seq=1, queued_at=0), q("small", gpus=1, seq=2, queued_at=0)]
    d = schedule(queued, running, GPUS8, now=1)
    assert started(d) == ["small"]


def test_no_starvation_after_age_limit() -> None:
    inv = Inventory(gpus=tuple(range(8)), cpu_slots=2, starvation_s=30)
    running = [r("a", (0, 1, 2, 3, 4, 5))]
    queued = [q("big", gpus=8, seq=1, queued_at=0), q("small", gpus=1, seq=2, queued_at=0)]
    d = schedule(queued, running, inv, now=31)
    assert started(d) == []  # free GPUs are held for the starving head
    assert "big" in d.reasons


def test_easy_backfill_with_time_limits() -> None:
    running = [r("a", (0, 1, 2, 3, 4, 5), expected_end=100.0)]
    queued = [
        q("big", gpus=8, seq=1),
        q("short", gpus=1, seq=2, duration_est_s=50),
        q("long", gpus=1, seq=3, duration_est_s=500),
    ]
    d = schedule(queued, running, GPUS8, now=10)
    assert started(d) == ["short"]  # ends before the head's reservation; "long" would delay it


def test_more_gpus_than_pool_waits_with_reason() -> None:
    d = schedule([q("huge", gpus=16)], [], GPUS8, now=0)
    assert d.starts == [] and "16 GPUs" in d.reasons["huge"]


def test_cpu_jobs_use_cpu_slots() -> None:
    queued = [q(f"c{i}", gpus=0, seq=i) for i in range(4)]
    d = schedule(queued, [r("cpu", ())], GPUS8, now=0)
    assert started(d) == ["c0"]  # 2 slots, one in use


def test_cordoned_gpus_are_never_used() -> None:
    inv = Inventory(gpus=(1, 2, 3), cpu_slots=2)  # GPU 0 cordoned: not schedulable
    d = schedule([q(f"j{i}", seq=i) for i in range(4)], [], inv, now=0)
    assert sorted(g for s in d.starts for g in s.gpus) == [1, 2, 3]


def test_jobs_with_time_limits_do_not_starve_a_head_of_unknown_start() -> None:
    # "a" has no time limit, so when "big" can start is unknown: a job with a time limit
    # must not take the GPUs held for it (a stream of such jobs would starve it).
    inv = Inventory(gpus=tuple(range(8)), cpu_slots=2, starvation_s=30)
    running = [r("a", (0, 1, 2, 3))]
    queued = [
        q("big", gpus=8, seq=1, queued_at=0),
        q("timed", gpus=1, seq=2, queued_at=0, duration_est_s=60),
    ]
    d = schedule(queued, running, inv, now=31)
    assert started(d) == []


def test_bounded_bypass_lets_the_next_submissions_overtake_a_reserved_head() -> None:
    inv = Inventory(gpus=tuple(range(8)), cpu_slots=2, starvation_s=30, bypass_jobs=1)
    running = [r("a", (0, 1, 2, 3, 4, 5))]
    queued = [
        q("big", gpus=8, seq=1, queued_at=0),
        q("next", gpus=1, seq=2, queued_at=0),
        q("later", gpus=1, seq=3, queued_at=0),
    ]
    d = schedule(queued, running, inv, now=31)
    assert started(d) == ["next"]  # within 1 submission of the head; "later" is not


def test_bounded_bypass_leaves_an_easy_head_alone() -> None:
    # Every end known: the head is reserved by EASY, and only jobs that end before its shadow
    # time may use its GPUs, bypass or not.
    inv = Inventory(gpus=tuple(range(8)), cpu_slots=2, starvation_s=30, bypass_jobs=10)
    running = [r("a", (0, 1, 2, 3, 4, 5), expected_end=100.0)]
    queued = [q("big", gpus=8, seq=1), q("long", gpus=1, seq=2, duration_est_s=500)]
    assert started(schedule(queued, running, inv, now=10)) == []


def _stream(inv: Inventory, horizon: float = 3600.0) -> tuple[float | None, int]:
    """An 8-GPU job queued at t=0 into a stream of 1-GPU jobs (one every 5 s, 60 s each:
    more than 8 GPUs' worth, so the pool never empties by itself). Returns when the big job
    starts (None if not within ``horizon``) and how many jobs started after it was queued."""
    queued = {"big": q("big", gpus=8, seq=0, queued_at=0.0)}
    # the stream is already going: GPU k is busy until 5 * k + 5 s
    running = {f"r{k}": r(f"r{k}", (k,), started_at=5.0 * k - 55) for k in range(8)}
    ends = {f"r{k}": 5.0 * k + 5 for k in range(8)}
    overtakers = 0
    t, i = 0.0, 0
    while t <= horizon:
        for job_id in [j for j, e in ends.items() if e <= t]:
            del running[job_id], ends[job_id]
        i += 1
        queued[f"s{i}"] = q(f"s{i}", gpus=1, seq=i, queued_at=t)
        for s in schedule(list(queued.values()), list(running.values()), inv, now=t).starts:
            if s.job_id == "big":
                return t, overtakers
            overtakers += 1
            del queued[s.job_id]
            running[s.job_id] = r(s.job_id, s.gpus, started_at=t)
            ends[s.job_id] = t + 60.0
        t += 5.0
    return None, overtakers


def test_bounded_bypass_does_not_starve_a_big_job_under_a_stream_of_small_ones() -> None:
    # Without an age limit the stream would starve the big job forever ...
    unbounded = Inventory(gpus=tuple(range(8)), cpu_slots=2, starvation_s=float("inf"))
    assert _stream(unbounded)[0] is None
    # ... with bypass, only the next N submissions may overtake it once it reserves (at 30 s):
    # it starts once the jobs then running end (60 s) and the N have run, 8 at a time.
    for n in (0, 4, 16, 64):
        inv = Inventory(gpus=tuple(range(8)), cpu_slots=2, starvation_s=30, bypass_jobs=n)
        start, overtakers = _stream(inv)
        assert start is not None and start <= 30 + 60 * (1 + math.ceil(n / 8))
        assert overtakers <= n + 8  # those within N of it, and those that started before 30 s
