"""The sqlite MLflow store: built aside, renamed into place; a half-built one set aside or named.

MLflow creates a sqlite store by running some 60 schema migrations in place, and they are not
transactional: a kill -9 in the middle leaves a store that no later open can finish
("duplicate column name", ``_alembic_tmp_*`` tables). So a new store is built under another
name (``<store>.building``) and renamed into place once complete, and a store found half-built
(an interrupted migration from before this, or a copy from elsewhere) is moved aside when it
holds no runs (never deleted), or reported with the way to recover when it does. Everything
here runs under the caller's init lock (``air_skills.tracking.mlflow``): one builder at a time.
Writes go through MLflow itself (but for a job's first run: tracking/sqlite_runs.py); its
tables are read here only to tell a half-built store.

Those migrations take 10-20 s on a busy machine: the first launch on a fresh home spent its
time there (issue 24: 15.9 s against ~0.3 s for the next). So the first store built on a
machine is also kept, empty, as a template in the user's cache folder (one per MLflow schema
version, owner-only); a later fresh home copies it (milliseconds) after checking it is ours,
complete, at this MLflow's schema version and empty.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shutil
import sqlite3
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from air_skills.errors import TrackingUnavailable

SQLITE_PREFIX = "sqlite:///"
BUILDING = ".building"  # <store>.building: the store being built, renamed into place when done
ASIDE = ".broken-"  # <store>.broken-<time>: a half-built store without runs, moved aside
SIDE_FILES = ("-journal", "-wal", "-shm")  # sqlite's files beside a database


@dataclass(frozen=True)
class StoreState:
    """What a sqlite store file holds, read without MLflow's help."""

    exists: bool  # a database with tables (an absent or empty file is not one)
    problem: str | None = None  # why it is half-built; None when complete or unreadable
    runs: int | None = 0  # the runs it holds; None when they cannot be counted


def sqlite_path(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` tracking URI; None for any other store (or sqlite options)."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    rest = uri[len(SQLITE_PREFIX) :]
    if not rest or rest.startswith(":memory:") or "?" in rest:
        return None  # in-memory, or URI options: left to MLflow as it is
    return Path(rest)


def _connect(path: Path) -> sqlite3.Connection:
    # Read-write on purpose: a hot journal left by a kill is rolled back by sqlite on open (its
    # own recovery); a read-only connection would refuse the file instead. Only SELECTs follow.
    return sqlite3.connect(f"file:{urllib.parse.quote(str(path))}", uri=True, timeout=30)


def _head_revision() -> str | None:
    """The schema version this MLflow writes (None if MLflow cannot say)."""
    try:
        from mlflow.store.db.utils import _get_latest_schema_revision

        return str(_get_latest_schema_revision())
    except Exception:
        return None


def head_without_import() -> str | None:
    """The schema version this MLflow writes, read from its migration files (milliseconds;
    ``_head_revision`` imports MLflow): the one revision no other names as its parent. None
    when that cannot be told (no MLflow, another layout, more than one head)."""
    try:
        installed = importlib.metadata.distribution("mlflow")  # found, not imported
        versions = Path(str(installed.locate_file("mlflow/store/db_migrations/versions")))
        revisions: set[str] = set()
        parents: set[str] = set()
        for migration in versions.glob("*.py"):
            text = migration.read_text(errors="replace")
            rev = _REVISION.search(text)
            if rev:
                revisions.add(rev.group(1))
            down = _DOWN_REVISION.search(text)
            if down:
                parents.update(re.findall(r"[\"']([0-9a-f]+)[\"']", down.group(1)))
    except (OSError, ValueError, ImportError):
        return None
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


_REVISION = re.compile(r"^revision(?:\s*:[^=\n]+)?\s*=\s*[\"']([0-9a-f]+)[\"']", re.M)
_DOWN_REVISION = re.compile(r"^down_revision(?:\s*:[^=\n]+)?\s*=\s*(.+)$", re.M)


def inspect(path: Path, head: str | None = None) -> StoreState:
    """Whether ``path`` holds a complete MLflow store, a half-built one, or nothing yet.
    ``head``: this MLflow's schema version when known already (else MLflow is asked)."""
    try:
        if path.stat().st_size == 0:
            return StoreState(exists=False)
    except FileNotFoundError:
        return StoreState(exists=False)
    try:
        conn = _connect(path)
        try:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if not tables:
                return StoreState(exists=False)
            version = None
            if "alembic_version" in tables:
                row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
                version = row[0] if row else None
            runs: int | None = 0
            if "runs" in tables:
                runs = int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        # Locked for longer than the timeout, or not a database: MLflow's open says which.
        return StoreState(exists=True, problem=None, runs=None)
    leftovers = sorted(t for t in tables if t.startswith("_alembic_tmp_"))
    head = head or _head_revision()
    if leftovers:
        problem = f"an interrupted schema migration left its work table {leftovers[0]}"
    elif version is None:
        problem = "no schema version is recorded: its creation was interrupted"
    elif head is not None and version != head:
        problem = (
            f"its schema is at version {version}, this MLflow writes {head} (a migration was"
            " interrupted, or the store comes from another MLflow version)"
        )
    else:
        problem = None
    return StoreState(exists=True, problem=problem, runs=runs)


def recovery(path: Path) -> str:
    """What to do about a half-built store that holds runs (kept as it is)."""
    return (
        f"make a backup (cp {path} {path}.backup), then move it aside (mv {path} {path}.broken):"
        " the next tracked launch builds a new store, and the old runs stay readable in the moved"
        f" file (mlflow ui --backend-store-uri sqlite:///{path}.broken); a store from an older"
        f" MLflow can instead be upgraded in place: mlflow db upgrade sqlite:///{path}"
    )


def half_built_error(path: Path, state: StoreState) -> TrackingUnavailable:
    held = "runs that could not be counted" if state.runs is None else f"{state.runs} run(s)"
    return TrackingUnavailable(
        f"MLflow store {path} is half-built ({state.problem}) and holds {held}, so it is kept"
        f" as it is and tracking is off; to recover: {recovery(path)}",
        hint=recovery(path),
    )


def ensure_store(path: Path, default_artifacts: str | None = None) -> None:
    """Leave ``path`` holding a complete store (building it if needed), or raise
    TrackingUnavailable naming the recovery. The caller holds the init lock.

    ``default_artifacts``: the artifact location of MLflow's own ``Default`` experiment in a
    store built here (MLflow would set ``<cwd>/mlruns/0``, and a template copied to every home
    would carry the folder it was first built from; issue 38.4)."""
    building = path.with_name(path.name + BUILDING)
    _remove_with_side_files(building)  # a build killed earlier: nobody else builds now
    state = inspect(path)
    if state.problem is not None:
        if state.runs != 0:
            raise half_built_error(path, state)
        set_aside(path)
    elif state.exists:
        return
    _build(path, building, default_artifacts)


def set_aside(path: Path) -> Path:
    """Move a half-built store (and its sqlite side files) to ``<store>.broken-<time>``."""
    aside = path.with_name(f"{path.name}{ASIDE}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.replace(path, aside)
    for side in SIDE_FILES:
        src = Path(str(path) + side)
        if src.exists():
            os.replace(src, Path(str(aside) + side))
    _fsync_dir(path.parent)
    return aside


def build_from_template(path: Path, head: str, default_artifacts: str | None = None) -> bool:
    """Leave ``path`` holding a complete store copied from the template of schema ``head``
    (the caller found it without MLflow: ``head_without_import``), without importing MLflow;
    False, changing nothing, when there is no such template (``ensure_store`` builds one) or
    ``path`` holds a store already that is not complete. The caller holds the init lock."""
    state = inspect(path, head)
    if state.exists:
        return state.problem is None
    path.parent.mkdir(parents=True, exist_ok=True)
    building = path.with_name(path.name + BUILDING)
    _remove_with_side_files(building)
    if not _copy_template(template_path(head), building, head):
        return False
    _install(path, building, default_artifacts)
    return True


def _build(path: Path, building: Path, default_artifacts: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    template = template_path()
    if template is None or not _copy_template(template, building):
        from mlflow.tracking import MlflowClient

        uri = SQLITE_PREFIX + str(building)
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # runs every migration, on the copy
        _dispose_engine(uri)
        if template is not None:
            _keep_template(building, template)
    _install(path, building, default_artifacts)


def _install(path: Path, building: Path, default_artifacts: str | None) -> None:
    """Rename a complete store built at ``building`` into place, durably."""
    if default_artifacts is not None:
        _set_default_artifacts(building, default_artifacts)
    with open(building, "rb") as f:
        os.fsync(f.fileno())
    # A journal beside the final name would be taken for the new store's hot journal.
    for side in SIDE_FILES:
        Path(str(path) + side).unlink(missing_ok=True)
    os.replace(building, path)
    _fsync_dir(path.parent)
    _dispose_engine(SQLITE_PREFIX + str(path))  # a pooled connection to a replaced file


def _set_default_artifacts(store: Path, location: str) -> None:
    """Point the ``Default`` experiment (id 0) of a store being built at ``location``."""
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute("UPDATE experiments SET artifact_location=? WHERE experiment_id=0", (location,))


def template_path(head: str | None = None) -> Path | None:
    """The empty store kept for this MLflow schema version (None: MLflow cannot say which)."""
    head = head or _head_revision()
    if head is None:
        return None
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("air-skills", appauthor=False)) / f"mlflow-store-{head}.db"


def _ours(path: Path) -> bool:
    """Owned by us and writable by nobody else (the file and its folder), as OpenSSH asks."""
    try:
        return all(
            st.st_uid == os.geteuid() and not st.st_mode & 0o022
            for st in (path.stat(), path.parent.stat())
        )
    except OSError:
        return False


def _copy_template(template: Path | None, building: Path, head: str | None = None) -> bool:
    """Copy the template store to ``building`` when it is ours, complete and empty."""
    if template is None or not template.is_file() or not _ours(template):
        return False
    state = inspect(template, head)
    if not state.exists or state.problem is not None or state.runs != 0:
        return False
    try:
        shutil.copyfile(template, building)
    except OSError:
        _remove_with_side_files(building)
        return False
    return True


def _keep_template(built: Path, template: Path) -> None:
    """Keep a copy of a store just built (empty) as the template; any failure is no matter."""
    tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    try:
        template.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copyfile(built, tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, template)
    except OSError:
        tmp.unlink(missing_ok=True)


def _dispose_engine(uri: str) -> None:
    """Close MLflow's pooled connections for ``uri`` (it keeps one engine per URI)."""
    if "mlflow" not in sys.modules:
        return  # not loaded here: nothing pooled (and no import for nothing)
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        engine = SqlAlchemyStore._engine_map.get(uri)
        if engine is not None:
            engine.dispose()
    except Exception:
        pass  # an MLflow without that cache: nothing pooled to close


def _remove_with_side_files(path: Path) -> None:
    for p in (path, *(Path(str(path) + side) for side in SIDE_FILES)):
        p.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
