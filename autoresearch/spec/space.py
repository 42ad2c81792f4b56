"""The search space at work: check proposed diffs, sample values, spot duplicates."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from typing import Any

from autoresearch.spec.study_schema import Study, check_value
from autoresearch.spec.study_sections import ChoiceParam, FloatParam, IntParam


def normalize_value(param: Any, value: Any) -> Any:
    """An accepted value in its canonical type (an integral float for an int becomes an int)."""
    if isinstance(param, IntParam) and isinstance(value, float):
        return int(value)
    if isinstance(param, FloatParam) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(param, ChoiceParam):
        for v in param.values:
            if v == value and type(v) is type(value):
                return v
        for v in param.values:
            if v == value:
                return v
    return value


def config_key(study: Study, config: Mapping[str, Any]) -> str:
    """What makes two trials the same: their values for the search-space keys."""
    values = {}
    for key, param in study.search_space.items():
        v = config.get(key)
        if isinstance(v, float):
            v = float(f"{v:.10g}")
        values[key] = normalize_value(param, v) if v is not None else None
    return json.dumps(values, sort_keys=True, default=str)


def check_diff(
    study: Study,
    diff: Any,
    taken: Mapping[str, str],
) -> tuple[dict[str, Any] | None, list[str]]:
    """(normalized diff, problems). ``taken`` maps config keys already used to a label
    ("trial 3", "proposal 2 of this batch") so that a duplicate says what it repeats."""
    if not isinstance(diff, dict):
        return None, [f"the diff must be an object of key: value, not {type(diff).__name__}"]
    problems: list[str] = []
    out: dict[str, Any] = {}
    valid = ", ".join(study.search_space)
    for key, value in diff.items():
        param = study.search_space.get(key)
        if param is None:
            problems.append(f"unknown key {key!r}: the search space has {valid}")
            continue
        found = check_value(key, param, value)
        if found:
            problems += found
        else:
            out[key] = normalize_value(param, value)
    if problems:
        return None, problems
    key = config_key(study, study.config_for(out))
    if key in taken:
        return None, [f"duplicate of {taken[key]}: {json.dumps(out, sort_keys=True)}"]
    return out, []


def clean_diff(study: Study, params: Mapping[str, Any]) -> dict[str, Any]:
    """The keys whose values differ from the base config, floats to 6 significant digits
    (readable in the journal and the prompt; well below any search's resolution)."""
    out = {}
    for k, v in params.items():
        param = study.search_space.get(k)
        if isinstance(param, FloatParam) and isinstance(v, float):
            v = min(max(_round_sig(v), param.low), param.high)
        if k not in study.base_config or study.base_config[k] != v:
            out[k] = v
    return out


def _round_sig(value: float, digits: int = 6) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def sample_value(param: Any, rng: random.Random) -> Any:
    if isinstance(param, FloatParam):
        if param.log:
            v = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
        else:
            v = rng.uniform(param.low, param.high)
        return min(max(_round_sig(v), param.low), param.high)
    if isinstance(param, IntParam):
        if param.log:
            v = round(
                math.exp(rng.uniform(math.log(param.low - 0.5 + 1e-9), math.log(param.high + 0.5)))
            )
            return min(max(int(v), param.low), param.high)
        return rng.randint(param.low, param.high)
    return rng.choice(param.values)
