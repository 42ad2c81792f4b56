"""Whether MLflow runs can still take a job's metrics, checked without importing MLflow.

A spare run is handed to a job only if it is SCHEDULED (as spares are made) or RUNNING and
neither it nor its experiment was deleted (MLflow refuses metrics for those). On the sqlite
store MLflow's own tables are read (read-only, as tracking/mlflow.py's fast reads do); on a
tracking server, its REST API.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

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
        conn = _reader(path)
        rows = conn.execute(
            "SELECT r.run_uuid FROM runs r JOIN experiments e"
            " ON e.experiment_id = r.experiment_id"
            f" WHERE r.run_uuid IN ({marks}) AND r.status IN ('SCHEDULED', 'RUNNING')"
            " AND r.lifecycle_stage = 'active' AND e.lifecycle_stage = 'active'",
            run_ids,
        ).fetchall()
    except (OSError, sqlite3.Error):
        _forget(path)
        return set()
    return {r[0] for r in rows}


_READERS = threading.local()  # {path: ((device, inode), connection)}, per thread
_KEPT = 4  # files with an open reader per thread (a process mostly tracks into one)


def _reader(path: Path) -> sqlite3.Connection:
    """A read-only connection to MLflow's sqlite file, kept open: opening one cost a
    launch about a millisecond. Each query still reads the file's current state; a file
    replaced since (a new store at that path) gets a new connection."""
    st = os.stat(path)  # missing: no store yet, so no spare in it either
    ident = (st.st_dev, st.st_ino)
    kept: dict[Path, tuple[tuple[int, int], sqlite3.Connection]] = _READERS.__dict__.setdefault(
        "conns", {}
    )
    entry = kept.get(path)
    if entry is not None and entry[0] == ident:
        return entry[1]
    _forget(path)
    while len(kept) >= _KEPT:
        _forget(next(iter(kept)))
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    kept[path] = (ident, conn)
    return conn


def _forget(path: Path) -> None:
    entry = _READERS.__dict__.get("conns", {}).pop(path, None)
    if entry is not None:
        entry[1].close()
