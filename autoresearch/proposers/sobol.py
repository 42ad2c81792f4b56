"""Scrambled Sobol points over a search space: an even first sample, the same for the same seed."""

from __future__ import annotations

import math
from typing import Any

from autoresearch.study_schema import FloatParam, IntParam, Study


def unit_point(dims: int, seed: int, index: int) -> list[float]:
    """Point ``index`` of the scrambled Sobol sequence in [0, 1)^dims (a pure function)."""
    from scipy.stats import qmc

    engine = qmc.Sobol(dims, scramble=True, seed=seed)
    if index:
        engine.fast_forward(index)  # skipping points draws none, so no balance warning
    return [float(u) for u in engine.random(1)[0]]


def sobol_config(study: Study, seed: int, index: int) -> dict[str, Any]:
    """The search-space values at Sobol point ``index``: log axes uniform in log space, ints
    and choices split into equal cells (so each value gets its share of the points)."""
    out: dict[str, Any] = {}
    point = unit_point(len(study.search_space), seed, index)
    for (key, param), u in zip(study.search_space.items(), point):
        if isinstance(param, FloatParam):
            low, high = _ends(param.low, param.high, param.log)
            value = math.exp(low + u * (high - low)) if param.log else low + u * (high - low)
            out[key] = min(max(value, param.low), param.high)
        elif isinstance(param, IntParam):
            if param.log:  # each integer owns [v - 0.5, v + 0.5) on the log axis
                low, high = math.log(param.low - 0.5 + 1e-9), math.log(param.high + 0.5)
                value = int(round(math.exp(low + u * (high - low))))
            else:
                value = param.low + int(u * (param.high - param.low + 1))
            out[key] = min(max(value, param.low), param.high)
        else:
            out[key] = param.values[min(int(u * len(param.values)), len(param.values) - 1)]
    return out


def _ends(low: float, high: float, log: bool) -> tuple[float, float]:
    return (math.log(low), math.log(high)) if log else (low, high)
