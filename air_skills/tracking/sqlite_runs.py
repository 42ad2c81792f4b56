"""A job's MLflow run made in MLflow's own sqlite tables, so a job never waits for MLflow's import.

A job launched into an experiment that has no spare run yet (a study's first trial, the
first job of a new experiment) needs its run before its command starts: the job reads
MLFLOW_RUN_ID from its first instruction. Made through MLflow, that run waits for MLflow's
import (the home's tracking writer: 2-3 s on a quiet machine, 7-12 s on a busy one). Here the
run, and its experiment when there is none, are written as MLflow's SQL store writes them
(``SqlAlchemyStore.create_experiment`` / ``create_run``): the same columns, defaults and tags,
in one short transaction; the job's supervisor then completes the run (params, tags, data
inputs) through MLflow beside the running job, as it does for a claimed spare run.

Only where the tables are known to be what this was written against: a complete sqlite store
at a schema version named in ``KNOWN_SCHEMAS`` (a test checks the installed MLflow writes one
of them), workspaces off, the experiment absent or active. Anything else returns None and the
run is made through MLflow as before; nothing here raises.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.parse
import uuid
from pathlib import Path

from air_skills.tracking.sqlite_store import sqlite_path

# MLflow schema versions whose ``experiments``, ``runs`` and ``tags`` tables this writes
# (MLflow 3.17's head). A store at any other version is left to MLflow.
KNOWN_SCHEMAS = frozenset({"dc11669786a5"})
WORKSPACE = "default"  # the workspace MLflow gives every experiment while workspaces are off
RUN_NAME_TAG = "mlflow.runName"
_MAX_NAME = 250  # MLflow's limits: a run's name and a tag's key
_MAX_TAG_VALUE = 8000
_MAX_EXPERIMENT_NAME = 256  # the experiments.name column (MLflow checks 500)
_MAX_LOCATION = 2048  # MLFLOW_ARTIFACT_LOCATION_MAX_LENGTH's default


def create_run(
    uri: str,
    experiment: str,
    artifact_location: str | None,
    *,
    name: str,
    tags: dict[str, str],
) -> tuple[str, str] | None:
    """A RUNNING run named ``name`` with ``tags`` in experiment ``experiment`` (made, at
    ``artifact_location``, when absent); (run_id, experiment_id), or None when this store is
    not one to write here (the caller goes through MLflow)."""
    path = sqlite_path(uri)
    if path is None or not _plain(experiment, artifact_location, name, tags) or _workspaces():
        return None
    try:
        if path.stat().st_size == 0:
            return None  # not built yet: MLflow builds it
        with contextlib.closing(_connect(path)) as db:
            db.execute("BEGIN IMMEDIATE")  # one writer: the experiment's read and insert agree
            try:
                made = _write(db, experiment, artifact_location, name, tags)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT" if made is not None else "ROLLBACK")
            return made
    except (OSError, sqlite3.Error):
        return None


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: the transaction below is opened and ended explicitly. mode=rw: never
    # creates a file that is not there.
    db = sqlite3.connect(
        f"file:{urllib.parse.quote(str(path))}?mode=rw",
        uri=True,
        timeout=30,
        isolation_level=None,
    )
    db.execute("PRAGMA foreign_keys=ON")
    return db


def _write(
    db: sqlite3.Connection,
    experiment: str,
    artifact_location: str | None,
    name: str,
    tags: dict[str, str],
) -> tuple[str, str] | None:
    if not _known_schema(db):
        return None
    now = int(time.time() * 1000)
    row = db.execute(
        "SELECT experiment_id, lifecycle_stage, artifact_location FROM experiments"
        " WHERE workspace = ? AND name = ?",
        (WORKSPACE, experiment),
    ).fetchone()
    if row is None:
        if artifact_location is None:
            return None  # MLflow derives it from the server's root: left to MLflow
        cur = db.execute(
            "INSERT INTO experiments (name, artifact_location, lifecycle_stage, creation_time,"
            " last_update_time, workspace) VALUES (?, ?, 'active', ?, ?, ?)",
            (experiment, artifact_location, now, now, WORKSPACE),
        )
        exp_id, location = cur.lastrowid, artifact_location
    elif row[1] != "active":
        return None  # deleted: MLflow restores it (tracking/mlflow.py), not this
    else:
        exp_id, location = row[0], row[2]
    run_id = uuid.uuid4().hex
    artifact_uri = _run_artifacts(location, run_id)
    if artifact_uri is None:
        return None
    db.execute(
        "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id,"
        " status, start_time, end_time, source_version, lifecycle_stage, artifact_uri,"
        " experiment_id, deleted_time)"
        " VALUES (?, ?, 'UNKNOWN', '', '', 'unknown', 'RUNNING', ?, NULL, '', 'active', ?, ?,"
        " NULL)",
        (run_id, name, now, artifact_uri, exp_id),
    )
    db.executemany(
        'INSERT INTO tags ("key", value, run_uuid) VALUES (?, ?, ?)',
        [(k, v, run_id) for k, v in {**tags, RUN_NAME_TAG: name}.items()],
    )
    return run_id, str(exp_id)


def _known_schema(db: sqlite3.Connection) -> bool:
    try:
        rows = db.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return False
    return len(rows) == 1 and rows[0][0] in KNOWN_SCHEMAS


def _run_artifacts(location: str | None, run_id: str) -> str | None:
    """``<experiment's location>/<run id>/artifacts``, as MLflow's ``append_to_uri_path``
    makes it for a plain location (one with a query or fragment is left to MLflow)."""
    if not location or "?" in location or "#" in location:
        return None
    uri = f"{location.rstrip('/')}/{run_id}/artifacts"
    return uri if len(uri) <= _MAX_LOCATION else None


def _plain(experiment: str, artifact_location: str | None, name: str, tags: dict[str, str]) -> bool:
    """Whether MLflow's own checks would pass these as given (else MLflow says what is wrong)."""
    if not experiment or len(experiment) > _MAX_EXPERIMENT_NAME:
        return False
    if not name or len(name) > _MAX_NAME:
        return False
    if artifact_location is not None and len(artifact_location) > _MAX_LOCATION:
        return False
    return all(
        isinstance(k, str)
        and isinstance(v, str)
        and 0 < len(k) <= _MAX_NAME
        and len(v) <= _MAX_TAG_VALUE
        and k != RUN_NAME_TAG
        for k, v in tags.items()
    )


def _workspaces() -> bool:
    """MLflow's workspaces (3.x, off by default) give experiments another workspace."""
    flag = os.environ.get("MLFLOW_ENABLE_WORKSPACES", "").strip().lower()
    return flag in {"1", "true", "yes"} or bool(os.environ.get("MLFLOW_WORKSPACE"))
