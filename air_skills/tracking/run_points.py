"""Every metric point of some MLflow runs, for the results index (runtime/store/results_index.py).

On a sqlite store the points come straight from MLflow's ``metrics`` table with the stdlib's
sqlite3 (no MLflow import: a supervisor that indexes its job's end stays light); any other
store is read through ``MlflowClient``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from air_skills.tracking.sqlite_store import sqlite_path

Point = tuple[int, float, int]  # (step, value, timestamp ms); a NaN is float("nan")
RunPoints = dict[str, list[Point]]  # metric key -> its points, by step then time

# MLflow stores a NaN as 0.0 with is_nan set (tracking/mlflow.py reads it the same way).
_VALUE = "CASE WHEN is_nan THEN NULL ELSE value END"
_CHUNK = 500  # sqlite binds at most 999 parameters


def run_points(home: Path, uri: str, run_ids: list[str]) -> dict[str, RunPoints] | None:
    """{run_id: {key: [(step, value, ts), ...]}} for every run of ``run_ids`` (a run without
    metrics, or unknown to the store: {}); None when the store cannot be read now."""
    path = sqlite_path(uri)
    if path is not None:
        return _sqlite_points(path, run_ids)
    return _client_points(home, uri, run_ids)


def _sqlite_points(path: Path, run_ids: list[str]) -> dict[str, RunPoints] | None:
    out: dict[str, RunPoints] = {r: {} for r in run_ids}
    if not path.exists():
        return out  # no store yet: no run has logged anything
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return None
    try:
        for i in range(0, len(run_ids), _CHUNK):
            chunk = run_ids[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT run_uuid, key, step, {_VALUE}, timestamp FROM metrics"
                f" WHERE run_uuid IN ({marks})",
                chunk,
            ).fetchall()
            for run_id, key, step, value, ts in rows:
                v = float("nan") if value is None else float(value)
                out[run_id].setdefault(key, []).append((int(step), v, int(ts or 0)))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return out  # a store MLflow has not built yet: nothing logged
        return None
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    for points in out.values():
        for series in points.values():
            series.sort(key=lambda p: (p[0], p[2]))
    return out


def _client_points(home: Path, uri: str, run_ids: list[str]) -> dict[str, RunPoints] | None:
    from air_skills.tracking.mlflow import MlflowTracker

    tracker = MlflowTracker(home, uri)
    out: dict[str, RunPoints] = {}
    try:
        for run_id in run_ids:
            try:
                keys = sorted(tracker.client.get_run(run_id).data.metrics)
            except Exception as exc:
                if "RESOURCE_DOES_NOT_EXIST" in str(exc) or "not found" in str(exc).lower():
                    out[run_id] = {}  # a run the store does not hold: nothing to index
                    continue
                raise
            out[run_id] = {k: tracker.metric_history(run_id, k) for k in keys}
    except Exception:
        return None  # the server is down or refuses: index later
    return out
