"""Whether MLflow runs can still take a job's metrics, checked without importing MLflow.

A spare run is handed to a job only if it is RUNNING and neither it nor its experiment was
deleted (MLflow refuses metrics for those). On the sqlite store MLflow's own tables are read
(read-only, as tracking/mlflow.py's fast reads do); on a tracking server, its REST API.
"""

from __future__ import annotations

import sqlite3

from air_skills.tracking import rest
from air_skills.tracking.sqlite_store import sqlite_path


def checkable(uri: str) -> bool:
    """Whether runs of this store can be checked quickly (otherwise spares are not used)."""
    return sqlite_path(uri) is not None or rest.is_http(uri)


def usable_runs(uri: str, run_ids: list[str]) -> set[str]:
    """Those of ``run_ids`` that a job may log into; the empty set when it cannot be told."""
    if not run_ids:
        return set()
    if rest.is_http(uri):
        return rest.live_runs(uri, run_ids)
    path = sqlite_path(uri)
    if path is None:
        return set()
    marks = ",".join("?" * len(run_ids))
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = conn.execute(
                "SELECT r.run_uuid FROM runs r JOIN experiments e"
                " ON e.experiment_id = r.experiment_id"
                f" WHERE r.run_uuid IN ({marks}) AND r.status = 'RUNNING'"
                " AND r.lifecycle_stage = 'active' AND e.lifecycle_stage = 'active'",
                run_ids,
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return set()
    return {r[0] for r in rows}
