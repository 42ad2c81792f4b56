"""The one meaning of "best" (issue 39.5), shared by get_study, suggest_trials, TPE's notes,
the report and the page.

``best`` is the kept best: the trial the study keeps and would report (its value may be a mean
of repeats). ``lowest_seen`` is the single value lowest (for ``maximize``: highest) among every
run's, named apart with why it was not kept, so that no reply calls a trial discarded within
the noise floor "best so far". Pure functions over journal trials.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from autoresearch.journal.journal import Trial, TrialStatus

# Why a trial with the lowest single value was not kept, by its decision.
NOT_KEPT = {
    "discard": "within the noise floor of the kept best (or worse than it): not kept",
    "noise": "a repeat of the baseline, measuring the noise floor: the baseline's mean is kept",
    "incomparable": "ran on another hardware class than the baseline: not judged",
    "seed-ignored": "its seeds gave the identical value (the seed is not used): not kept",
    "confirm": "a confirmation run: its trial's mean is what counts",
}


def _usable(t: Trial) -> bool:
    v = t.value
    return (
        t.status == TrialStatus.SUCCEEDED
        and t.source != "final"
        and v is not None
        and math.isfinite(v)
        and abs(v) < 1.7976931348623157e308
    )


def lowest_trial(trials: Iterable[Trial], direction: str = "minimize") -> Trial | None:
    """The succeeded trial with the lowest (maximize: highest) single finite value."""
    done = [t for t in trials if _usable(t)]
    if not done:
        return None
    sign = 1.0 if direction == "minimize" else -1.0
    return min(done, key=lambda t: (sign * float(t.value or 0.0), t.number))


def why_not_kept(t: Trial) -> str:
    """Why trial ``t`` is not the kept best, in words."""
    if t.source == "confirm":
        return NOT_KEPT["confirm"]
    if t.decision in NOT_KEPT:
        return NOT_KEPT[t.decision]
    if t.decision == "keep":
        return "kept once, then beaten by a later kept trial"
    return "not judged yet (its decision comes when the trial is judged)"


def lowest_seen(
    trials: Iterable[Trial], kept: int | None, direction: str = "minimize"
) -> dict[str, Any] | None:
    """``{"trial", "value", "why_not_kept"}`` for the lowest single value seen when it is not
    the kept best's trial; None when it is (or none succeeded)."""
    low = lowest_trial(trials, direction)
    if low is None or low.number == kept:
        return None
    return {"trial": low.number, "value": low.value, "why_not_kept": why_not_kept(low)}


def role(t: Trial, kept: int | None, lowest: Trial | None) -> str:
    """What trial ``t`` is to the study, in the words every reply uses."""
    if t.number == kept:
        return "the kept best"
    if lowest is not None and t.number == lowest.number:
        return f"lowest_seen, {why_not_kept(t)}"
    return why_not_kept(t) if t.decision else "a finished trial"
