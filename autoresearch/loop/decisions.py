"""The loop's pure judgements: the noise floor, keep or discard, and whether to prune a trial."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from air_skills.vocabulary import Direction, better
from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.loop.early_stopping import Verdict, median_rule
from autoresearch.loop.selection import accept
from autoresearch.report.hardware import trial_class
from autoresearch.spec.study_schema import Study

# A trial that did not succeed is recorded as what happened to it; anything else is "failed".
UNSUCCESSFUL = {TrialStatus.PRUNED: "pruned", TrialStatus.CANCELLED: "cancelled"}


@dataclass(frozen=True)
class Decision:
    """What the loop journals for one finished trial."""

    trial: int
    decision: str  # keep | discard | baseline | noise | confirm | failed | pruned | cancelled
    # | tampered | incomparable
    confirmed: dict[str, Any] | None = None  # mean, std, n, paired: a confirmed candidate
    best: tuple[int, float | None] | None = None  # the new reference, when this trial sets it
    rule: str | None = None  # the acceptance rule that judged it (keep | discard)


def noise_stats(values: list[float], sigmas: float) -> tuple[float, float]:
    """(standard deviation, floor) of the baseline's repeated runs."""
    if len(values) < 2:
        return 0.0, 0.0
    std = statistics.stdev(values)
    return std, sigmas * std


def noise_floor_fields(study: Study, state: StudyState) -> dict[str, Any] | None:
    """The ``noise_floor`` event once every run of the base config has ended, else None."""
    if study.noise.repeats <= 0 or state.noise_floor is not None:
        return None
    noise_trials = [t for t in state.trials.values() if t.is_noise]
    complete = len(noise_trials) == study.noise.repeats + 1 and all(
        t.status.is_final() and t.job_done for t in noise_trials
    )
    if not complete:
        return None
    values = [
        t.value for t in noise_trials if t.status == TrialStatus.SUCCEEDED and t.value is not None
    ]
    std, floor = noise_stats(values, study.noise.sigmas)
    return {
        "values": values,
        "std": std,
        "floor": floor,
        "baseline_value": statistics.fmean(values) if values else None,
    }


def judging_order(
    state: StudyState, undecided: list[int], floor_known: bool
) -> tuple[list[int], bool]:
    """The finished trials in the order to judge them, and whether judging may begin: every
    trial is judged against the baseline, so the baseline goes first and is waited for."""
    order = list(undecided)
    baseline = state.trials.get(0)
    if baseline is not None and baseline.source == "baseline" and baseline.decision is None:
        if baseline.status.is_final() and baseline.number in order:
            order.remove(baseline.number)
            order.insert(0, baseline.number)
        else:
            floor_known = False
    return order, floor_known


def judge(
    value: float,
    best: float | None,
    floor: float,
    direction: Direction,
    rule: accept.Rule | None = None,
    std: float = 0.0,
) -> str:
    """``keep`` when ``value`` beats ``best`` under ``rule`` (default: by more than the noise
    floor), else ``discard``."""
    if best is None:
        return "keep"
    if rule is None or rule.kind == "noise-floor":
        # the floor is never negative: "beats it by more than the floor" is these two together
        return "keep" if better(value, best, direction) and abs(value - best) > floor else "discard"
    return "keep" if accept.beats(rule, value, best, std, floor, direction) else "discard"


def decide_trial(t: Trial, study: Study, state: StudyState, floor_known: bool) -> Decision | None:
    """The decision for one finished trial, or None while the noise floor is still unknown."""
    if t.failure_kind == "tampered":
        return Decision(t.number, "tampered")
    if t.status != TrialStatus.SUCCEEDED:
        return Decision(t.number, UNSUCCESSFUL.get(t.status, "failed"))
    if t.source == "confirm":
        return Decision(t.number, "confirm")
    if t.source == "final":  # a re-run of the final selection: judged there, not here
        return Decision(t.number, "final")
    if not floor_known:
        return None
    if t.is_noise:
        # the first successful run of the base config sets the reference: the mean of all of
        # them when the noise was measured
        if state.best_trial is None:
            value = t.value
            if study.noise.repeats > 0 and state.noise_values:
                value = statistics.fmean(state.noise_values)
            return Decision(t.number, "baseline", best=(t.number, value))
        return Decision(t.number, "noise")
    assert t.value is not None
    if study.hardware == "same" and off_baseline_class(t, state):
        return Decision(t.number, "incomparable")
    rule = accept.parse(study.accept)
    verdict = judge(t.value, state.best_value, state.noise_floor or 0.0,
                    study.objective.direction, rule, state.noise_std or 0.0)  # fmt: skip
    best = (t.number, t.value) if verdict == "keep" else None
    return Decision(t.number, verdict, best=best, rule=str(rule))


def off_baseline_class(t: Trial, state: StudyState) -> bool:
    """The trial ran on another hardware class than the baseline (both known): its value does
    not compare with the baseline's nor the best's (an A10G and an H100 under one budget)."""
    base = state.trials.get(0)
    if base is None or not base.is_noise:
        return False
    mine, theirs = trial_class(t), trial_class(base)
    return bool(mine and theirs and mine != theirs)


def may_be_pruned(t: Trial, job_status: str | None, cancelling: bool) -> bool:
    """Whether the early-stopping rule may look at a trial whose job is ``job_status``."""
    # the baseline's runs measure the noise: stopping the unlucky ones would bias it
    if t.is_noise or job_status not in (None, "RUNNING"):
        return False
    return t.status == TrialStatus.RUNNING and not cancelling


def prune_verdict(t: Trial, study: Study, state: StudyState) -> Verdict | None:
    """The median rule's verdict on a running trial's curve when it says stop, else None."""
    if len(t.curve) < 2:  # one point is no curve (and may be the closing summary)
        return None
    others = [
        o.curve
        for o in state.trials.values()
        if o.number != t.number
        and o.status in (TrialStatus.SUCCEEDED, TrialStatus.PRUNED)
        and o.curve
    ]
    last_steps = [
        o.curve[-1][0]
        for o in state.trials.values()
        if o.status == TrialStatus.SUCCEEDED and o.curve
    ]
    if last_steps and t.curve[-1][0] >= max(last_steps):
        return None  # at the last step there is nothing left to save: let it finish
    es = study.early_stopping
    verdict = median_rule(
        t.curve,
        others,
        direction=study.objective.direction,
        min_steps=es.min_steps,
        min_trials=es.min_trials,
        metric=study.objective.curve_metric,
    )
    return verdict if verdict.prune else None
