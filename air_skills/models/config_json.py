"""Whether a job's config can be written as JSON (the job reads it from AIR_CONFIG_FILE)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

# A config is hyperparameters: far below these. They bound the check itself, so that a YAML
# alias bomb (a few hundred bytes that expand without end) or a self-referring anchor is
# refused in a fraction of a second instead of exhausting memory when written as JSON.
MAX_CONFIG_VALUES = 1_000_000
MAX_CONFIG_DEPTH = 200


def _json_fix(what: str, value: Any) -> str:
    """Why ``value`` (named ``what``), a Python object JSON cannot hold, and what to write."""
    if isinstance(value, (set, frozenset)):
        return f"{what} is a set (!!set), which JSON cannot hold: write a list, e.g. [a, b]"
    if isinstance(value, (bytes, bytearray)):
        return f"{what} is binary data (!!binary), which JSON cannot hold: write a quoted string"
    text = str(value)[:60]
    return (
        f"{what} = {text} is a {type(value).__name__}, which JSON cannot hold:"
        f' quote it to pass it as text ("{text}")'
    )


def _json_key(key: str | float | None) -> str | None:
    """The text JSON writes for a mapping key (1 -> "1", True -> "true"); None: not finite."""
    if isinstance(key, str):
        return key
    if isinstance(key, float) and not math.isfinite(key):
        return None
    return json.dumps(key)


def json_problem(config: Mapping[str, Any]) -> str | None:
    """Why ``config`` cannot be written as JSON (naming the key), or None when it can.

    YAML turns ``2024-01-01`` into a date, ``!!set`` into a set and ``!!binary`` into bytes;
    JSON holds none of them, and the job reads its config as JSON (AIR_CONFIG_FILE).
    """
    stack: list[tuple[str, Any, int]] = [("config", config, 0)]
    seen = 0
    while stack:
        path, value, depth = stack.pop()
        seen += 1
        if seen > MAX_CONFIG_VALUES or depth > MAX_CONFIG_DEPTH:
            return (
                f"config is too large or too deep (over {MAX_CONFIG_VALUES} values or"
                f" {MAX_CONFIG_DEPTH} levels), or refers to itself (a YAML alias inside its"
                " own anchor): write it out plainly, without anchors and aliases"
            )
        if isinstance(value, float) and not math.isfinite(value):
            return (
                f"{path} = {value} is not a finite number, which JSON cannot hold:"
                f' give a number, or quote it to pass it as text ("{value}")'
            )
        if value is None or isinstance(value, (str, int, float)):
            continue  # bool is an int
        if isinstance(value, Mapping):
            names: dict[str, Any] = {}
            for key, item in value.items():
                if key is not None and not isinstance(key, (str, int, float)):
                    return _json_fix(f"a key under {path}", key)
                name = _json_key(key)
                if name is None:
                    return f"a key under {path} ({key}) is not a finite number: quote it"
                if name in names:
                    return (
                        f"{path} has two keys that JSON writes as {name!r} ({names[name]!r}"
                        f" and {key!r}; JSON keys are text): keep one"
                    )
                names[name] = key
                stack.append((f"{path}.{key}", item, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
        else:
            return _json_fix(path, value)
    return None
