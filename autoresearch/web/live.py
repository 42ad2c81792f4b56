"""The part of a study's view that changes without its journal: the running trials (their
metric curves from MLflow, durations, dollars), the GPUs they hold, the cost and budget so far.

The rest of the view changes only with the journal, so it is made once per journal change;
this part is small (only running trials) and made again at most once a second while trials run.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Protocol

from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.report.cost import (
    Pricing,
    study_cost,
    study_throughput,
    trial_cost,
    trial_gpus,
)


class LiveSource(Protocol):
    """What reads the runtime for the live part (data.StudyIndex)."""

    def live_curve(self, job_id: str, metric: str) -> list: ...

    def gpus_in_use(self, job_ids: set[str]) -> list[dict[str, Any]]: ...


LIVE_KEYS = ("running", "gpus", "cost", "budget")  # the view's keys that this part fills


def duration_s(t: Trial, now: float) -> float | None:
    if t.started_at is None:
        return None
    end = t.ended_at if t.ended_at is not None else (None if t.job_done else now)
    return None if end is None else round(max(0.0, end - t.started_at), 2)


def diff_text(diff: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in diff.items()
    )


def live_part(
    state: StudyState,
    budget: dict[str, Any],
    metric: str,
    alive: bool,
    index: LiveSource | None = None,
) -> dict[str, Any]:
    """{running, gpus, cost, budget} now (``budget``: the view's, whose clock-bound uses are
    brought up to date; ``index``: None reads nothing live, for a file)."""
    now = time.time()
    pricing = Pricing()
    running = []
    for t in state.ordered():
        if t.status != TrialStatus.RUNNING:
            continue
        curve = index.live_curve(t.job_id, metric) if index and t.job_id else []
        cost = trial_cost(t, now, pricing)
        running.append(
            {
                "n": t.number,
                "job_id": t.job_id,
                "diff_text": diff_text(t.diff) or "(base)",
                "curve": curve or t.curve,
                "duration_s": duration_s(t, now),
                "usd": cost["usd"],
                "gpu_hours": cost["gpu_hours"],
            }
        )
    active = {t.job_id for t in state.trials.values() if t.job_id and not t.job_done}
    budget = copy.deepcopy(budget)
    wall_s = state.wall_s_now(now) if alive else state.wall_s
    budget["wall_time_min"]["used"] = round(wall_s / 60, 3)
    budget["gpu_hours"]["used"] = round(state.gpu_hours(now), 5)
    slots = int(budget.get("concurrency") or 0) * trial_gpus(None, state)  # what trials held
    return {
        "running": running,
        "gpus": index.gpus_in_use(active) if index else [],
        "cost": {**study_cost(state, now), **study_throughput(state, wall_s, slots, now)},
        "budget": budget,
    }
