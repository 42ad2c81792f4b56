"""Confirmation before a keep (pure): which candidates are re-run, with which seeds, and the
paired verdict once the re-runs have ended.

A candidate that beats the best by less than ``noise.confirm_margin`` x the floor (every
candidate with ``noise.confirm: always``) is re-run ``noise.confirm_seeds`` times, with the
seeds of the baseline's noise repeats (so the baseline's runs pair with them). It is kept
only if its re-runs' mean, paired with the best's runs of the same seeds, still beats the best
by the floor. The screening run is left out of that mean: it was picked for being good.

Runs with different seeds that give the identical value, where the baseline's runs vary with
the seed, mean the candidate does not use the seed (a patch that fixed a lucky one): it is
never kept on that evidence; its decision is ``seed-ignored``, with the reason.
"""

from __future__ import annotations

import statistics
from typing import Any

from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.loop.selection import accept
from autoresearch.spec.study_schema import Study

MISSING = object()
SEED_IGNORED = "seed-ignored"  # the decision of a candidate whose result ignores the seed
SAME_REL = 1e-12  # values this close (relative) are one value: seeds changed nothing


def needed(t: Trial, study: Study, state: StudyState) -> bool:
    """Whether the candidate ``t``, which beats the best by the floor, must be confirmed."""
    noise = study.noise
    if noise.confirm_seeds <= 0 or not t.is_candidate or t.value is None:
        return False
    if noise.confirm == "always" or state.best_value is None:
        return noise.confirm == "always"
    floor = state.noise_floor or 0.0
    return abs(t.value - state.best_value) < noise.confirm_margin * floor


def seeds(study: Study) -> list[Any]:
    """The confirmation seeds: those of the baseline's noise repeats, 1..confirm_seeds on."""
    key = study.noise.seed_key
    start = study.base_config.get(key, 0)
    count = study.noise.confirm_seeds
    return [(start + k if isinstance(start, int) else k) for k in range(1, count + 1)]


def runs(t: Trial, study: Study) -> list[tuple[dict[str, Any], str]]:
    """(config, rationale) of each confirmation run of ``t``."""
    key = study.noise.seed_key
    return [({**t.config, key: s}, f"confirmation of trial {t.number}, {key}={s}")
            for s in seeds(study)]  # fmt: skip


def confirmations(state: StudyState, number: int) -> list[Trial]:
    return [c for c in state.ordered() if c.source == "confirm" and c.confirms == number]


def _by_seed(study: Study, trials: list[Trial]) -> dict[Any, float]:
    key = study.noise.seed_key
    out: dict[Any, float] = {}
    for t in trials:
        if t.status == TrialStatus.SUCCEEDED and t.value is not None:
            out.setdefault(str(t.config.get(key, MISSING)), t.value)
    return out


def best_runs(state: StudyState) -> list[Trial]:
    """The current best's runs: the base config's (baseline and noise) or a trial and its
    confirmation runs."""
    best = state.trials.get(state.best_trial) if state.best_trial is not None else None
    if best is None:
        return []
    if best.is_noise:
        return [t for t in state.ordered() if t.is_noise]
    return [best, *confirmations(state, best.number)]


def verdict(t: Trial, study: Study, state: StudyState) -> tuple[str, dict[str, Any]] | None:
    """(keep | discard, stats) once every confirmation run of ``t`` has ended, else None."""
    extra = confirmations(state, t.number)
    if any(not c.status.is_final() for c in extra):
        return None
    cand = _by_seed(study, extra)
    if not cand:
        return "discard", {"n": 0, "paired": 0, "failed_runs": len(extra)}
    best = _by_seed(study, best_runs(state))
    common = sorted(set(cand) & set(best))
    values = [v for v in (t.value, *cand.values()) if v is not None]
    direction = study.objective.direction
    floor = state.noise_floor or 0.0
    rule = accept.parse(study.accept)
    if common:
        runs_c, runs_b = [cand[s] for s in common], [best[s] for s in common]
    else:
        runs_c, runs_b = list(cand.values()), [float(state.best_value or 0.0)]
    mean_b = statistics.fmean(runs_b)
    keep = accept.beats_paired(rule, runs_c, runs_b, state.noise_std or 0.0, floor, direction)
    ignored = _seed_ignored(list(cand.values()), list(best.values()), floor)
    stats = {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "n": len(values),
        "paired": len(common),
        "best_mean": mean_b,
        "failed_runs": sum(1 for c in extra if c.status != TrialStatus.SUCCEEDED),
        "rule": str(rule),
    }
    if ignored:
        key = study.noise.seed_key
        stats["reason"] = (
            f"{SEED_IGNORED}: its {len(cand)} confirmation runs with different {key}s all gave"
            f" {cand[next(iter(cand))]!r}, while the baseline's runs vary with the {key}: the"
            f" trial does not use the {key} (a fixed one?), so its result is not evidence"
        )
        return SEED_IGNORED, stats
    return ("keep" if keep else "discard"), stats


def _same(values: list[float]) -> bool:
    lo, hi = min(values), max(values)
    return hi - lo <= SAME_REL * max(abs(lo), abs(hi), 1e-300)


def _seed_ignored(cand: list[float], best: list[float], floor: float) -> bool:
    """Two or more seeds, one value, where the baseline's seeds do change the value (a floor
    above 0, or the best's runs differ): the seed did not reach the result."""
    if len(cand) < 2 or not _same(cand):
        return False
    return floor > 0 or (len(best) > 1 and not _same(best))
