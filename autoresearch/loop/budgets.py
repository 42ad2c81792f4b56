"""A study's budgets (trials, wall time, GPU-hours, LLM dollars): spent, left, which one stops."""

from __future__ import annotations

import statistics
from typing import Any

from autoresearch.journal.journal import StudyState, TrialStatus
from autoresearch.spec.study_schema import Study


def duration_estimate_s(state: StudyState) -> float | None:
    """The median run time of the trials that succeeded (None before the first one)."""
    durations = [
        t.ended_at - t.started_at
        for t in state.trials.values()
        if t.status == TrialStatus.SUCCEEDED and t.started_at and t.ended_at
    ]
    return statistics.median(durations) if durations else None


def trial_slots(study: Study, state: StudyState, active: int, unlaunched: int) -> int:
    """How many more trials the concurrency and trial budgets allow now (GPUs aside)."""
    slots = study.budget.concurrency - active
    return min(slots, study.budget.trials - state.search_trials + unlaunched)


def fits_wall_time(study: Study, state: StudyState, now: float) -> bool:
    """Whether a typical trial launched now would end within the wall time left."""
    estimate = duration_estimate_s(state)
    if not (estimate and study.budget.wall_time_min):
        return True
    left = study.budget.wall_time_min * 60 - state.wall_s_now(now)
    return estimate <= left


def budget_stop(
    study: Study,
    state: StudyState,
    now: float,
    *,
    unlaunched: int,
    gpus_per_trial: int,
    stopping: bool,
) -> tuple[str | None, str | None]:
    """(hard, soft): the spent budget that cancels running trials, and the one that only stops
    launching; ``stopping`` says a stop is already under way (no projection is needed then)."""
    b = study.budget
    hard = None
    if b.wall_time_min and state.wall_s_now(now) >= b.wall_time_min * 60:
        hard = "budget:wall_time_min"
    elif b.gpu_hours and state.gpu_hours(now) >= b.gpu_hours:
        hard = "budget:gpu_hours"
    soft = None
    if state.search_trials >= b.trials and not unlaunched:
        soft = "budget:trials"
    elif study.proposer.type == "llm" and state.llm_usd >= b.llm_usd:
        soft = "budget:llm_usd"
    elif b.gpu_hours and not stopping and not hard and gpus_per_trial:
        # one more typical trial would overspend: stop launching, let the running ones end
        estimate = duration_estimate_s(state)
        if estimate:
            projected = state.gpu_hours(now) + estimate * gpus_per_trial / 3600.0
            if projected > b.gpu_hours:
                soft = "budget:gpu_hours"
    return hard, soft


def budget_left(study: Study, state: StudyState, now: float) -> dict[str, str]:
    """Each budget's remainder in words, for the proposer's prompt."""
    b = study.budget
    left = {"trials": f"{max(0, b.trials - state.search_trials)} of {b.trials} left"}
    if b.wall_time_min:
        used = state.wall_s_now(now) / 60
        left["wall time"] = (
            f"{max(0.0, b.wall_time_min - used):.1f} of {b.wall_time_min:g} min left"
        )
    if b.gpu_hours:
        left["GPU-hours"] = f"{max(0.0, b.gpu_hours - state.gpu_hours(now)):.3f} of {b.gpu_hours:g}"
    if study.proposer.type == "llm":
        left["LLM"] = f"${max(0.0, b.llm_usd - state.llm_usd):.3f} of ${b.llm_usd:g} left"
    return left


def llm_usd_left(study: Study, state: StudyState) -> float:
    return max(0.0, study.budget.llm_usd - state.llm_usd)


def spent(state: StudyState, now: float) -> dict[str, Any]:
    """What the study has used, as the ``stopped`` event records it."""
    return {
        "trials": state.search_trials,
        "best_trial": state.best_trial,
        "best_value": state.best_value,
        "wall_min": round(state.wall_s_now(now) / 60, 3),
        "gpu_hours": round(state.gpu_hours(), 5),
        "llm_usd": round(state.llm_usd, 6),
    }
