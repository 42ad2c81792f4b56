"""A big study's first screen: its view with only the first rows of the trial table and, for
the chart, each trial as [n, value, kind] and the best so far as its steps; without what is
below the fold (the lineage). A page inlines it (~40 KB, not the ~600 KB of a 1,000-trial view)
to paint at once; its event stream then brings the whole view."""

from __future__ import annotations

import json
from typing import Any

FIRST_ROWS = 40  # the table's rows in view at the top, with its buffer (study.js: 29)
WHOLE_UP_TO = 150  # a view of this many trials is inlined whole
FIRST = "first-"  # a first screen's version: the whole view's, with this before it
BELOW_THE_FOLD = ("lineage", "winning_patch")  # the page draws them once its first screen shows


def kind(row: dict[str, Any]) -> str:
    """How the chart draws a trial: p pruned, b a baseline run, k kept, o other; x: failed."""
    if row["status"] == "PRUNED":
        mark = "p"
    elif row["source"] in ("baseline", "noise"):
        mark = "b"
    else:
        mark = "k" if row["decision"] == "keep" else "o"
    return mark + ("x" if row["status"] == "FAILED" else "")


def first_static(static: dict[str, Any]) -> bytes | None:
    """The static part of the first screen as JSON (None: the view is small, inline it whole)."""
    rows = static["trials"]
    if len(rows) <= WHOLE_UP_TO:
        return None
    best = static["best_so_far"]
    first = {
        **{k: v for k, v in static.items() if k not in BELOW_THE_FOLD},
        "trials": rows[:FIRST_ROWS],
        "trials_total": len(rows),
        "points": [[r["n"], _short(r["value"]), kind(r)] for r in rows],
        # a step where the best changes: what the chart draws (1,000 trials: ~10, not 1,000)
        "best_so_far": [p for i, p in enumerate(best) if not i or p[1] != best[i - 1][1]],
    }
    return json.dumps(first, default=str, separators=(",", ":")).encode()


def _short(value: Any) -> Any:
    """A value to 6 significant digits (a chart's pixel is coarser)."""
    return float(f"{value:.6g}") if isinstance(value, float) else value
