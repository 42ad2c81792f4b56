"""Shared words of the job model: name patterns and the direction of an objective (stdlib only)."""

from __future__ import annotations

import re
from typing import Literal

# A project, a data input, a study trial name: starts with a letter or digit, then _ . - too.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
NAME_RE = re.compile(NAME_PATTERN)

Direction = Literal["minimize", "maximize"]
DIRECTIONS: tuple[Direction, ...] = ("minimize", "maximize")


def better(a: float, b: float, direction: Direction) -> bool:
    """True when ``a`` is strictly better than ``b`` for an objective going ``direction``."""
    return a < b if direction == "minimize" else a > b


def best(values: list[float], direction: Direction) -> float:
    """The best of ``values`` (not empty) for ``direction``."""
    return min(values) if direction == "minimize" else max(values)
