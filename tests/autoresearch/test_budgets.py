"""The budgets without a loop: what is spent, what is left, and which budget stops the study."""

from __future__ import annotations

from typing import Any

import pytest
from ar_helpers import small_study

from autoresearch.journal.journal import StudyState, replay
from autoresearch.loop import budgets
from autoresearch.study.study import parse_study

T0 = 1000.0  # the session starts here; `now` in the cases is T0 + seconds


def state_of(trials: list[dict[str, Any]], llm_usd: float = 0.0) -> StudyState:
    """A replayed state: each trial as {n, status, started, ended, gpus, gpu_s} (times from T0)."""
    events: list[dict[str, Any]] = [{"event": "session_started", "ts": T0}]
    for t in trials:
        n = t["n"]
        events.append({"event": "proposal", "ts": T0, "trial": n, "source": "random"})
        if t.get("status", "PROPOSED") == "PROPOSED":
            continue
        events.append(
            {"event": "launched", "ts": T0, "trial": n, "job_id": f"j{n}", "gpus": t.get("gpus", 0)}
        )
        if "started" in t:
            events.append(
                {"event": "job_started", "ts": T0, "trial": n, "started_at": T0 + t["started"]}
            )
        if t["status"] != "RUNNING":
            events.append(
                {
                    "event": "finished",
                    "ts": T0,
                    "trial": n,
                    "status": t["status"],
                    "ended_at": T0 + t.get("ended", 0.0),
                    "started_at": T0 + t["started"] if "started" in t else None,
                    "gpu_s": t.get("gpu_s", 0.0),
                    # a SUCCEEDED trial without an objective is no trial the loop writes
                    "value": 1.0 if t["status"] == "SUCCEEDED" else None,
                }
            )
    if llm_usd:
        events.append({"event": "llm_call", "ts": T0, "usd": llm_usd})
    return replay(events)


def done(n: int, seconds: float, **kw: Any) -> dict[str, Any]:
    return {"n": n, "status": "SUCCEEDED", "started": 0.0, "ended": seconds, **kw}


STOP_CASES = [
    # (study overrides, trials, llm_usd, now - T0, unlaunched, gpus_per_trial, stopping,
    #  expected (hard, soft))
    ({}, [], 0.0, 1, 0, 0, False, (None, None)),
    ({"budget": {"trials": 2}}, [done(0, 1), done(1, 1)], 0.0, 5, 0, 0, False,
     (None, "budget:trials")),
    # a proposed trial not launched yet still runs before the trial budget counts as spent
    ({"budget": {"trials": 2}}, [done(0, 1), {"n": 1}], 0.0, 5, 1, 0, False, (None, None)),
    ({"budget": {"wall_time_min": 1}}, [], 0.0, 61, 0, 0, False,
     ("budget:wall_time_min", None)),
    ({"budget": {"wall_time_min": 1}}, [], 0.0, 59, 0, 0, False, (None, None)),
    ({"budget": {"gpu_hours": 0.01}}, [done(0, 40, gpu_s=40.0)], 0.0, 50, 0, 1, False,
     ("budget:gpu_hours", None)),
    # 30 of 36 GPU-seconds spent; one more 30 s trial would overspend: stop launching only
    ({"budget": {"gpu_hours": 0.01}}, [done(0, 30, gpu_s=30.0)], 0.0, 50, 0, 1, False,
     (None, "budget:gpu_hours")),
    # ... unless a stop is under way already, or trials use no GPU
    ({"budget": {"gpu_hours": 0.01}}, [done(0, 30, gpu_s=30.0)], 0.0, 50, 0, 1, True,
     (None, None)),
    ({"budget": {"gpu_hours": 0.01}}, [done(0, 30, gpu_s=30.0)], 0.0, 50, 0, 0, False,
     (None, None)),
    ({"proposer": "llm", "budget": {"llm_usd": 0.5}}, [], 0.5, 1, 0, 0, False,
     (None, "budget:llm_usd")),
    ({"proposer": "tpe", "budget": {"llm_usd": 0.5}}, [], 0.5, 1, 0, 0, False, (None, None)),
    # the first spent budget names the stop
    ({"budget": {"wall_time_min": 1, "gpu_hours": 0.001}}, [done(0, 10, gpu_s=10.0)], 0.0, 61,
     0, 1, False, ("budget:wall_time_min", None)),
]  # fmt: skip


@pytest.mark.parametrize(
    "overrides,trials,llm_usd,now,unlaunched,gpus,stopping,expected", STOP_CASES
)
def test_which_budget_stops(
    overrides: dict, trials: list, llm_usd: float, now: float, unlaunched: int, gpus: int,
    stopping: bool, expected: tuple,
) -> None:  # fmt: skip
    study = parse_study(small_study(**overrides))
    state = state_of(trials, llm_usd)
    got = budgets.budget_stop(
        study, state, T0 + now, unlaunched=unlaunched, gpus_per_trial=gpus, stopping=stopping
    )
    assert got == expected


def test_duration_estimate_is_the_median_of_successes() -> None:
    assert budgets.duration_estimate_s(state_of([])) is None
    failed = {"n": 3, "status": "FAILED", "started": 0.0, "ended": 500.0}
    state = state_of([done(0, 10), done(1, 30), done(2, 20), failed])
    assert budgets.duration_estimate_s(state) == 20


@pytest.mark.parametrize(
    "concurrency,trials,active,unlaunched,expected",
    [
        (2, 10, 0, 0, 2),  # concurrency bounds
        (2, 10, 2, 0, 0),
        (4, 3, 1, 0, 2),  # the trial budget bounds
        (4, 3, 1, 1, 2),  # a proposed, unlaunched trial takes a slot, not more budget
        (4, 2, 2, 0, 0),  # every trial launched
    ],
)
def test_trial_slots(concurrency: int, trials: int, active: int, unlaunched: int, expected: int):
    study = parse_study(small_study(budget={"concurrency": concurrency, "trials": trials}))
    running = [{"n": i, "status": "RUNNING"} for i in range(active)]
    state = state_of(running + [{"n": active + i} for i in range(unlaunched)])
    assert budgets.trial_slots(study, state, active, unlaunched) == expected


def test_fits_wall_time() -> None:
    study = parse_study(small_study(budget={"wall_time_min": 1}))
    state = state_of([done(0, 20)])
    assert budgets.fits_wall_time(study, state, T0 + 30)  # 30 s left, a trial takes 20
    assert not budgets.fits_wall_time(study, state, T0 + 45)
    unbounded = parse_study(small_study())
    assert budgets.fits_wall_time(unbounded, state, T0 + 10_000)


def test_budget_left_in_words() -> None:
    study = parse_study(
        small_study(proposer="llm", budget={"trials": 5, "wall_time_min": 2, "llm_usd": 1.0})
    )
    left = budgets.budget_left(study, state_of([done(0, 1)], llm_usd=0.25), T0 + 30)
    assert left == {
        "trials": "4 of 5 left",
        "wall time": "1.5 of 2 min left",
        "LLM": "$0.750 of $1 left",
    }
    assert budgets.llm_usd_left(study, state_of([], llm_usd=3.0)) == 0.0
    spent = budgets.spent(state_of([done(0, 1, gpu_s=36.0)], llm_usd=0.25), T0 + 60)
    assert spent["trials"] == 1 and spent["wall_min"] == 1.0
    assert spent["gpu_hours"] == 0.01 and spent["llm_usd"] == 0.25
