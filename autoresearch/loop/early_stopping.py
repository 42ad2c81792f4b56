"""The median rule: stop a trial whose best value so far is worse than the median of the other
finished trials' best values at the same step (as Optuna's MedianPruner, on journal curves)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from air_skills.vocabulary import Direction, best, better

Curve = Sequence[Sequence[float]]  # [[step, value], ...], steps ascending


@dataclass(frozen=True)
class Verdict:
    prune: bool
    step: float | None = None
    value: float | None = None  # the trial's best value up to ``step``
    median: float | None = None
    compared: int = 0
    reason: str = ""


def best_until(curve: Curve, step: float, direction: Direction) -> float | None:
    values = [v for s, v in curve if s <= step and math.isfinite(v)]
    if not values:
        return None
    return best(values, direction)


def median_rule(
    curve: Curve,
    others: Sequence[Curve],
    *,
    direction: Direction,
    min_steps: int,
    min_trials: int,
    metric: str = "value",
) -> Verdict:
    """Whether the trial with ``curve`` should stop, compared with the ``others`` (finished)."""
    if not curve:
        return Verdict(False, reason="no intermediate values yet")
    step = curve[-1][0]
    if step < min_steps:
        return Verdict(False, step=step, reason=f"step {step:g} < min_steps {min_steps}")
    mine = best_until(curve, step, direction)
    if mine is None:
        return Verdict(False, step=step, reason="no finite value yet")
    peers = [
        b
        for c in others
        if c and c[-1][0] >= step and (b := best_until(c, step, direction)) is not None
    ]
    if len(peers) < min_trials:
        return Verdict(
            False,
            step=step,
            value=mine,
            compared=len(peers),
            reason=f"{len(peers)} finished trials reached step {step:g}; {min_trials} needed",
        )
    med = statistics.median(peers)
    worse = better(med, mine, direction)
    reason = (
        f"best {metric} {mine:.5g} by step {step:g} is worse than the median {med:.5g}"
        f" of {len(peers)} finished trials at that step"
    )
    return Verdict(worse, step=step, value=mine, median=med, compared=len(peers), reason=reason)
