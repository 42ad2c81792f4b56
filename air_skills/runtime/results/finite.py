"""The one rule for non-finite values, shared by every reply that shows a metric.

A value that is nan, +-inf, or at float max in magnitude (what MLflow clamps an inf to:
1.7976931348623157e+308, which ``math.isfinite`` accepts) is not a result: a job whose objective
is such a value diverged. ``show_value`` renders it as ``inf`` / ``-inf`` / ``nan``, never as a
number. Pure functions, stdlib only.
"""

from __future__ import annotations

import math
import sys
from typing import Any

FLOAT_MAX = sys.float_info.max
DIVERGED = "diverged"  # the word a reply uses for a job whose objective is non-finite


def is_finite_value(v: Any) -> bool:
    """Whether ``v`` is a usable number: a real number, finite, and below float max in size.
    None, bools, strings and anything not a number are not finite values."""
    if v is None or isinstance(v, bool):
        return False
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return False
    return math.isfinite(f) and abs(f) < FLOAT_MAX


def non_finite_word(v: Any) -> str | None:
    """``"inf"``, ``"-inf"`` or ``"nan"`` for a non-finite number (float max counts as inf),
    None for a finite one or for something that is not a number."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if math.isnan(f):
        return "nan"
    if math.isinf(f) or abs(f) >= FLOAT_MAX:
        return "inf" if f > 0 else "-inf"
    return None


def show_value(v: Any, fmt: str = ".5g") -> str:
    """A value as a reply shows it: ``inf`` / ``-inf`` / ``nan`` for non-finite ones (float
    max included), ``fmt`` for finite numbers, ``-`` for None, ``str`` otherwise."""
    if v is None:
        return "-"
    word = non_finite_word(v)
    if word is not None:
        return word
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return format(v, fmt)


def json_value(v: Any) -> Any:
    """A value for structured (JSON) content: finite numbers as they are, non-finite ones as
    the strings ``"inf"`` / ``"-inf"`` / ``"nan"`` (JSON has no such numbers; float max is not
    one)."""
    word = non_finite_word(v)
    return word if word is not None else v


def finite_or_none(v: Any) -> float | None:
    """``v`` as a float when it is a finite value, else None."""
    return float(v) if is_finite_value(v) else None


def diverged_note(diverged: int, total: int) -> str:
    """``"2 of 3 diverged"``, or ``""`` when none did."""
    return f"{diverged} of {total} diverged" if diverged else ""
