"""Shared helpers for the benchmarks: a scratch AIR_HOME, percentiles, and a small table."""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/X.py` from the repo root finds air_skills
    sys.path.insert(0, str(REPO))
BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # and the optional sibling benches (launch_ray, packing_quota)
    sys.path.insert(0, str(BENCH))


@contextmanager
def scratch_home(gpus: int = 8, **env: str) -> Iterator[Path]:
    """A fresh AIR_HOME with ``gpus`` simulated GPUs, set in os.environ for the duration."""
    root = Path(tempfile.mkdtemp(prefix="air-bench-"))
    home = root / "air_home"
    saved = dict(os.environ)
    # Supervisors of a scratch home outlive it only briefly (they wait for a next job).
    env = {"AIR_SUPERVISOR_LINGER_S": "10", **env}
    os.environ.update({"AIR_HOME": str(home), "AIR_SIMULATED_GPUS": str(gpus), **env})
    for key in ("AIR_SIMULATED_GPU_FAULTS", "MLFLOW_TRACKING_URI", "AIR_PROJECT"):
        os.environ.pop(key, None)
    try:
        yield home
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(root, ignore_errors=True)


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    data = sorted(values)
    k = (len(data) - 1) * pct / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain, aligned text table (numbers right-aligned)."""
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = []
        for i, v in enumerate(r):
            raw = rows[n - 1][i] if n else None
            numeric = isinstance(raw, (int, float)) and not isinstance(raw, bool)
            parts.append(v.rjust(widths[i]) if numeric else v.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def verdict(ratio: float, goal: float, higher_is_better: bool) -> str:
    """``meets`` or ``misses`` the goal, for the line beside each ratio."""
    ok = ratio >= goal if higher_is_better else ratio <= goal
    return "meets" if ok else "MISSES"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)
