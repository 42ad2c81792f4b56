"""The final selection by re-evaluation (pure): which configs are re-run when the search ends,
with which seeds, and the winner and the overfit gap once the re-runs have ended.

The finalists are the kept best and the best-ranked trials whose values lie within the noise
floor of the lowest seen (``final.top_k`` in all): the search cannot tell them apart. Each is
re-run with ``final.seeds`` fresh seeds, the baseline beside them with the same seeds (paired);
the winner is the finalist whose re-runs have the best mean on the objective, never one lucky
draw. With a ``holdout`` those runs also give the held-out metric, and the gap between the
validation gain and the held-out gain says how much of the search's gain was the split's.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from air_skills.vocabulary import better
from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.spec.study_schema import Study

FRESH_OFFSET = 1000  # final seeds start here past the base seed: never a search run's seed
NO_HELDOUT_GAIN = "no held-out gain"


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def eligible(state: StudyState) -> list[Trial]:
    """Trials the final selection may pick: judged candidates that succeeded (not tampered,
    incomparable, seed-ignored, nor a trial that logged the held-out metric)."""
    return [
        t
        for t in state.ordered()
        if t.is_candidate
        and t.status == TrialStatus.SUCCEEDED
        and _finite(t.value)
        and t.decision in ("keep", "discard")
        and not t.holdout_leak
    ]


def finalists(study: Study, state: StudyState) -> list[int]:
    """The trials to re-run: the kept best first (when it is a trial), then the best-ranked
    within the noise floor of the lowest seen, ``top_k`` in all."""
    settings = study.final_runs
    if settings is None:
        return []
    sign = 1.0 if study.objective.direction == "minimize" else -1.0
    ranked = sorted(eligible(state), key=lambda t: (sign * float(t.value or 0.0), t.number))
    if not ranked:
        return []
    floor = state.noise_floor or 0.0
    top = float(ranked[0].value or 0.0)
    group = [t.number for t in ranked if abs(float(t.value or 0.0) - top) <= floor]
    best = state.best_trial
    if best is not None and best in {t.number for t in ranked}:
        group = [best, *(n for n in group if n != best)]
    return group[: settings.top_k]


def seeds(study: Study) -> list[Any]:
    """The fresh seeds every finalist and the baseline are re-run with (the same for all)."""
    settings = study.final_runs
    count = settings.seeds if settings else 0
    start = study.base_config.get(study.noise.seed_key, 0)
    base = start if isinstance(start, int) and not isinstance(start, bool) else 0
    return [base + FRESH_OFFSET + k for k in range(count)]


def plan(study: Study, state: StudyState, numbers: list[int], seeds_: list[Any]) -> list[dict]:
    """The proposal fields of each re-run: the baseline (``final_of`` 0) and each finalist,
    with every seed."""
    key = study.noise.seed_key
    out = []
    for n in [0, *numbers]:
        t = state.trials.get(n)
        config = dict(study.base_config) if n == 0 or t is None else dict(t.config)
        diff = {} if n == 0 or t is None else dict(t.diff)
        for s in seeds_:
            fields: dict[str, Any] = {
                "source": "final",
                "diff": diff,
                "config": {**config, key: s},
                "rationale": f"final re-evaluation of {'the baseline' if n == 0 else f'trial {n}'},"
                f" {key}={s}",
                "final_of": n,
            }
            if t is not None and n != 0 and (t.patch is not None or t.parent is not None):
                fields.update(patch=t.patch, parent=t.parent)
            out.append(fields)
    return out


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"mean": None, "std": None, "n": 0}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "n": len(values)}


def change_pct(value: float | None, base: float | None) -> float | None:
    """The change from ``base`` to ``value`` in percent of ``base`` (signed)."""
    if value is None or base is None or base == 0:
        return None
    return (value - base) / abs(base) * 100.0


def summary(study: Study, state: StudyState) -> dict[str, Any]:
    """The winner and the figures of each re-evaluated config (the ``final_done`` event)."""
    plan_ = state.final_started or {}
    numbers = [0, *plan_.get("finalists", [])]
    holdout = study.objective.holdout
    key = study.noise.seed_key
    runs: dict[int, list[Trial]] = {n: [] for n in numbers}
    for t in state.ordered():
        if t.source == "final" and t.final_of in runs and t.status == TrialStatus.SUCCEEDED:
            runs[t.final_of].append(t)
    configs = []
    for n in numbers:
        mine = runs[n]
        if n == 0:  # the base config's search draws: the baseline and its noise repeats
            search = [t.value for t in state.ordered() if t.is_noise and _finite(t.value)]
        else:  # the trial's own draw and its confirmation runs
            search = [v for v in (state.trials[n].value, *_confirm_values(state, n)) if _finite(v)]
        held = [t.metrics.get(holdout.metric) for t in mine] if holdout else []
        configs.append(
            {
                "trial": n,
                "val": _stats([float(t.value) for t in mine if _finite(t.value)]),
                "search": _stats([float(v) for v in search if v is not None]),
                "holdout": _stats([float(v) for v in held if _finite(v)]),
                "seeds": [t.config.get(key) for t in mine],
                "failed_runs": sum(
                    1
                    for t in state.ordered()
                    if t.source == "final" and t.final_of == n and t.status != TrialStatus.SUCCEEDED
                ),
            }
        )
    direction = study.objective.direction
    scored = [c for c in configs[1:] if c["val"]["mean"] is not None]
    winner = None
    for c in scored:  # the finalists' order breaks ties: the kept best first
        if winner is None or better(c["val"]["mean"], winner["val"]["mean"], direction):
            winner = c
    out: dict[str, Any] = {
        "winner": winner["trial"] if winner else None,
        "configs": configs,
        "accept": study.accept,
        "holdout_metric": holdout.metric if holdout else None,
    }
    out.update(gap(study, configs[0], winner))
    return out


def _confirm_values(state: StudyState, n: int) -> list[float | None]:
    return [c.value for c in state.ordered() if c.source == "confirm" and c.confirms == n]


def gap(study: Study, base: dict[str, Any], win: dict[str, Any] | None) -> dict[str, Any]:
    """The gains of the winner over the baseline, on validation (the re-runs) and held out,
    and the gap between them in points; whether the held-out gain is beyond its noise."""
    if win is None:
        return {"verdict": "no winner: no finalist's re-runs succeeded"}
    sign = 1.0 if study.objective.direction == "maximize" else -1.0
    val = change_pct(win["val"]["mean"], base["val"]["mean"])
    search = change_pct(win["search"]["mean"], base["search"]["mean"])
    out: dict[str, Any] = {"val_change_pct": val, "search_change_pct": search}
    if study.objective.holdout is None:
        return out
    held = change_pct(win["holdout"]["mean"], base["holdout"]["mean"])
    out["holdout_change_pct"] = held
    if val is not None and held is not None:
        out["gap_points"] = sign * (val - held)
    out["holdout_gain"] = holdout_gain(study, base["holdout"], win["holdout"])
    out["verdict"] = describe(out)
    return out


def holdout_gain(study: Study, base: dict[str, Any], win: dict[str, Any]) -> bool:
    """Whether the winner's held-out mean beats the baseline's beyond its noise: by more than
    ``noise.sigmas`` x the standard error of the difference of the two means."""
    if base["mean"] is None or win["mean"] is None:
        return False
    if not better(win["mean"], base["mean"], study.objective.direction):
        return False
    se = math.sqrt((base["std"] or 0.0) ** 2 / max(base["n"], 1) + (win["std"] or 0.0) ** 2
                   / max(win["n"], 1))  # fmt: skip
    return abs(win["mean"] - base["mean"]) > study.noise.sigmas * se


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.1f}%"


def describe(g: dict[str, Any]) -> str:
    """ "val -12.3%, held-out -9.8%: gap 2.5 points" (and "no held-out gain" when so)."""
    if "holdout_change_pct" not in g:
        return f"val {_pct(g.get('val_change_pct'))}"
    text = f"val {_pct(g.get('val_change_pct'))}, held-out {_pct(g.get('holdout_change_pct'))}"
    if g.get("gap_points") is not None:
        text += f": gap {g['gap_points']:.1f} points"
    if not g.get("holdout_gain"):
        text += f"; {NO_HELDOUT_GAIN}"
    return text
