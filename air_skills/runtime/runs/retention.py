"""Retention of finished jobs (``air gc --older-than DAYS --keep-last N``): folders, logs,
index rows and MLflow runs of old jobs go; what anything still needs stays.

A finished job is kept when it ended within ``older_than_days`` or is among the ``keep_last``
latest to end (either rule keeps it; a rule left unset keeps nothing by itself, both unset
remove nothing). Whatever the rules say, these stay:

- queued and running jobs (a finished job's run ended before its record did);
- a study's kept trials (decided ``keep`` or ``baseline``), its best, its baseline and the runs
  that measure them (noise, confirm, final), and the trials their code descends from (the
  lineage ``autoresearch export`` commits): read from each study's journal (AIR_HOME/studies/
  <name>/journal.jsonl, or the folder AIR_HOME/studies/.index/<name> names). A job tagged with
  a study (``autoresearch.study.study``) whose journal cannot be read is kept whole;
- any job a live job references (its id, or a path in its folder, anywhere in its spec or in
  the environment it was launched from).

A removal: the MLflow run deleted (then purged where the store allows it; the home's sqlite
store purges 500 runs in one transaction, not one by one), the job's folder
removed by descriptor (``JobFolder.remove``: a link that stands in its place is unlinked,
never followed), then its rows (jobs, results, events, batch_jobs) in one transaction. A job
whose run cannot be deleted (tracking down) stays, counted in ``errors``. ``dry_run`` says
what would go and the bytes it would free, and changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.home import read_launch_env
from air_skills.job_folder import JobFolder
from air_skills.runtime.store.results_index import STUDY_TAG
from air_skills.runtime.store.store import TERMINAL, Store

STUDIES = "studies"  # AIR_HOME/studies/<name>/journal.jsonl (autoresearch/study/registry.py)
INDEX = ".index"
JOURNAL = "journal.jsonl"
KEPT_DECISIONS = ("keep", "baseline")
MEASURES = ("baseline", "noise", "confirm", "final")  # runs that measure a kept value
MAX_JOURNAL_BYTES = 256 << 20
_JOB_ID = re.compile(r"job-[0-9a-f]{10}")
_ROW_TABLES = ("results", "events", "batch_jobs", "jobs")


def policy() -> tuple[float | None, int | None]:
    """(AIR_GC_KEEP_DAYS, AIR_GC_KEEP_JOBS): the rules ``air gc`` applies when given none."""
    return settings.get("AIR_GC_KEEP_DAYS"), settings.get("AIR_GC_KEEP_JOBS")


def collect(
    home: Path,
    older_than_days: float | None = None,
    keep_last: int | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> dict[str, Any]:
    """Remove the finished jobs no rule keeps; returns what went (or would), and why the
    others stayed (counts)."""
    home = Path(home)
    now = time.time() if now is None else now
    report: dict[str, Any] = {
        "dry_run": dry_run, "older_than_days": older_than_days, "keep_last": keep_last,
        "jobs_removed": 0, "job_ids": [], "bytes_freed": 0, "runs_deleted": 0,
        "kept": {"recent": 0, "study": 0, "referenced": 0}, "errors": [],
    }  # fmt: skip
    if older_than_days is None and keep_last is None:
        return report
    store = Store(home)
    try:
        victims = _candidates(home, store, older_than_days, keep_last, now, report)
        if not victims:
            return report
        if dry_run:
            for row in victims:
                report["bytes_freed"] += _folder_bytes(home, row["job_id"])
                report["job_ids"].append(row["job_id"])
            report["jobs_removed"] = len(victims)
            report["runs_deleted"] = sum(1 for row in victims if row["run_id"])
            return report
        _remove(home, store, victims, report)
    finally:
        store.close()
    return report


def _candidates(
    home: Path,
    store: Store,
    older_than_days: float | None,
    keep_last: int | None,
    now: float,
    report: dict[str, Any],
) -> list[Any]:
    terminal = "(" + ",".join(f"'{s}'" for s in TERMINAL) + ")"
    rows = store.read(
        "SELECT job_id, run_id, spec, ended_at, created_at"
        f" FROM jobs WHERE status IN {terminal}"
        " ORDER BY COALESCE(ended_at, created_at) DESC, seq DESC",
        (),
    )
    live = store.read(f"SELECT job_id, spec FROM jobs WHERE status NOT IN {terminal}", ())
    referenced = _referenced(home, live)
    protected, unknown_studies = _study_jobs(home, store)
    cutoff = None if older_than_days is None else now - older_than_days * 86400.0
    out = []
    for i, row in enumerate(rows):
        ended = row["ended_at"] or row["created_at"]
        recent = (keep_last is not None and i < keep_last) or (
            cutoff is not None and ended >= cutoff
        )
        if recent:
            report["kept"]["recent"] += 1
        elif row["job_id"] in referenced:
            report["kept"]["referenced"] += 1
        elif row["job_id"] in protected or _study_of(row["spec"]) in unknown_studies:
            report["kept"]["study"] += 1
        else:
            out.append(row)
    return out


def _study_of(spec: str) -> str | None:
    try:
        tags = json.loads(spec).get("tags") or {}
    except (ValueError, AttributeError):
        return None
    value = tags.get(STUDY_TAG) if isinstance(tags, dict) else None
    return value if isinstance(value, str) else None


def _referenced(home: Path, live: Iterable[Any]) -> set[str]:
    """Job ids that a queued or running job names: in its spec (config, data inputs, workdir,
    env) or in the environment it was launched from."""
    found: set[str] = set()
    for row in live:
        found.update(_JOB_ID.findall(row["spec"] or ""))
        env = read_launch_env(home / "jobs" / row["job_id"]) or {}
        found.update(_JOB_ID.findall(json.dumps(env)))
        found.discard(row["job_id"])
    return found


# --- studies: the jobs a journal keeps -------------------------------------------------------


def _journals(home: Path) -> dict[str, Path]:
    """{study name: its journal}: AIR_HOME/studies/<name>/, then the folders the registry names
    (a study started elsewhere with --dir)."""
    root = home / STUDIES
    found: dict[str, Path] = {}
    try:
        names = sorted(p for p in os.listdir(root) if not p.startswith("."))
    except OSError:
        names = []
    for name in names:
        if (root / name / JOURNAL).is_file():
            found[name] = root / name / JOURNAL
    try:
        registered = sorted(os.listdir(root / INDEX))
    except OSError:
        registered = []
    for name in registered:
        try:
            folder = Path((root / INDEX / name).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue
        if folder.is_absolute() and (folder / JOURNAL).is_file():
            found[name] = folder / JOURNAL
    return found


def _study_jobs(home: Path, store: Store) -> tuple[set[str], set[str]]:
    """(job ids the studies' journals keep, names of the studies whose trials are tagged but
    whose journal is missing or unreadable: all their jobs stay)."""
    keep: set[str] = set()
    journals = _journals(home)
    unreadable = _tagged_studies(store) - set(journals)
    for name, journal in journals.items():
        try:
            keep |= kept_jobs(_events(journal))
        except (OSError, ValueError):
            unreadable.add(name)
    return keep, unreadable


def _tagged_studies(store: Store) -> set[str]:
    path = f'$.tags."{STUDY_TAG}"'
    rows = store.read(
        "SELECT DISTINCT json_extract(spec, ?) AS s FROM jobs"
        " WHERE json_extract(spec, ?) IS NOT NULL",
        (path, path),
    )
    return {r["s"] for r in rows if isinstance(r["s"], str)}


def _events(journal: Path) -> list[dict[str, Any]]:
    # a FIFO or a device in the journal's place is refused (OSError), never waited on
    fd = os.open(journal, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{journal} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(MAX_JOURNAL_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_JOURNAL_BYTES:
        raise ValueError(f"{journal} is larger than {MAX_JOURNAL_BYTES} bytes")
    out = []
    for line in raw.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a torn last line (a killed loop): the journal's reader skips it too
        if isinstance(ev, dict):
            out.append(ev)
    return out


def kept_jobs(events: list[dict[str, Any]]) -> set[str]:
    """The job ids of a study's kept trials, its best and baseline, the runs that measure them
    and the trials their code descends from, from its journal's events."""
    source: dict[int, str] = {}
    parent: dict[int, int | None] = {}
    measures: dict[int, int | None] = {}  # a confirm or final run -> the trial it measures
    jobs: dict[int, set[str]] = {}
    kept: set[int] = set()
    for ev in events:
        kind = ev.get("event")
        try:
            n = int(ev["trial"]) if "trial" in ev else None
        except (TypeError, ValueError):
            continue
        if n is None:
            if kind == "final_done" and isinstance(ev.get("winner"), int):
                kept.add(ev["winner"])
            continue
        if kind == "proposal":
            source[n] = str(ev.get("source", ""))
            parent[n] = ev.get("parent") if isinstance(ev.get("parent"), int) else None
            of = ev.get("confirms", ev.get("final_of"))
            measures[n] = of if isinstance(of, int) else None
        elif kind in ("launched", "finished") and isinstance(ev.get("job_id"), str):
            jobs.setdefault(n, set()).add(ev["job_id"])
        elif kind == "decision" and ev.get("decision") in KEPT_DECISIONS:
            kept.add(n)
    keep = set(kept) | {n for n, s in source.items() if s in MEASURES}
    keep |= {n for n, of in measures.items() if of in kept}
    for n in list(keep):  # the lineage of each: the code an export of it builds on
        seen: set[int] = set()
        p = parent.get(n)
        while p is not None and p not in seen:
            seen.add(p)
            keep.add(p)
            p = parent.get(p)
    return {job for n in keep for job in jobs.get(n, ())}


# --- removal ---------------------------------------------------------------------------------


def _folder_bytes(home: Path, job_id: str) -> int:
    """Bytes the job's folder holds (allocated blocks), walked by descriptors; 0 for a link
    or anything not a folder standing in its place."""
    try:
        folder = JobFolder.open(home / "jobs" / job_id)
    except OSError:
        return 0
    total = 0
    with folder:
        for _rel, _fd, _name, st in folder.walk_files():
            total += st.st_blocks * 512 if st.st_blocks else st.st_size
    return total


def _remove(home: Path, store: Store, victims: list[Any], report: dict[str, Any]) -> None:
    runs_gone = _delete_runs(home, victims, report)
    gone: list[str] = []
    for row in victims:
        job_id = row["job_id"]
        if job_id not in runs_gone:  # tracking down: the job stays, nothing orphaned
            continue
        report["bytes_freed"] += _folder_bytes(home, job_id)
        _remove_folder(home, job_id)
        gone.append(job_id)
    for i in range(0, len(gone), 500):
        chunk = gone[i : i + 500]
        marks = ",".join("?" * len(chunk))
        with store.tx() as c:
            for table in _ROW_TABLES:
                c.execute(f"DELETE FROM {table} WHERE job_id IN ({marks})", chunk)
    report["jobs_removed"] = len(gone)
    report["job_ids"] = gone


RUNS_AT_ONCE = 500  # runs purged in one transaction of MLflow's SQL store


def _delete_runs(home: Path, victims: list[Any], report: dict[str, Any]) -> set[str]:
    """The jobs whose MLflow runs are gone now (or that had none). The runs of one tracking
    store go in bulk where it is MLflow's SQL store (the home's sqlite): RUNS_AT_ONCE runs
    per transaction, their rows and artifacts under AIR_HOME; any other store (a server)
    one run at a time. A run that cannot be deleted keeps its job, named in ``errors``."""
    from air_skills.runtime.runs.job_run import job_uri

    done: set[str] = set()
    by_uri: dict[str, list[Any]] = {}
    for row in victims:
        if row["run_id"]:
            uri = job_uri(home, home / "jobs" / row["job_id"])
            by_uri.setdefault(uri, []).append(row)
        else:
            done.add(row["job_id"])
    trackers: dict[str, Any] = {}
    for uri, rows in by_uri.items():
        sql = _sql_store(home, uri, trackers)
        if sql is None:  # a server, or MLflow down: one at a time (each says why it stays)
            for row in rows:
                try:
                    if _delete_run(home, row["job_id"], row["run_id"], trackers):
                        report["runs_deleted"] += 1
                    done.add(row["job_id"])
                except Exception as exc:
                    report["errors"].append(_not_deleted(row["job_id"], exc))
            continue
        for i in range(0, len(rows), RUNS_AT_ONCE):
            chunk = rows[i : i + RUNS_AT_ONCE]
            try:
                report["runs_deleted"] += _purge_many(home, sql, [r["run_id"] for r in chunk])
                done.update(r["job_id"] for r in chunk)
            except Exception as exc:
                report["errors"] += [_not_deleted(r["job_id"], exc) for r in chunk]
    return done


def _not_deleted(job_id: str, exc: Exception) -> str:
    return f"{job_id}: its MLflow run was not deleted: {exc}"


def _sql_store(home: Path, uri: str, trackers: dict[str, Any]) -> Any:
    """MLflow's SQL store behind ``uri`` when it can purge runs in bulk; None otherwise."""
    from air_skills.tracking.mlflow import MlflowTracker

    try:
        tracker = trackers.get(uri) or trackers.setdefault(uri, MlflowTracker(home, uri))
        backend = getattr(getattr(tracker.client, "_tracking_client", None), "store", None)
        from mlflow.store.tracking import sqlalchemy_store
    except Exception:
        return None
    models = getattr(sqlalchemy_store, "_RUN_DELETE_CASCADE_MODELS", None)
    if models is None or not isinstance(backend, sqlalchemy_store.SqlAlchemyStore):
        return None
    return backend


def _purge_many(home: Path, backend: Any, run_ids: list[str]) -> int:
    """Purge these runs from MLflow's SQL store in one transaction, as its own
    ``_hard_delete_run`` does one run (metrics, latest metrics, params, tags, the run), their
    artifacts first where they lie under AIR_HOME; returns how many were there."""
    from mlflow.store.tracking.dbmodels.models import SqlRun
    from mlflow.store.tracking.sqlalchemy_store import _RUN_DELETE_CASCADE_MODELS

    with backend.ManagedSessionMaker(read_only=False) as session:
        found = (
            session.query(SqlRun.run_uuid, SqlRun.artifact_uri)
            .filter(SqlRun.run_uuid.in_(run_ids))
            .all()
        )
        ids = [run_uuid for run_uuid, _ in found]
        for _, artifact_uri in found:
            _remove_artifacts(home, artifact_uri or "")
        for model in (*_RUN_DELETE_CASCADE_MODELS, SqlRun):
            session.query(model).filter(model.run_uuid.in_(ids)).delete(synchronize_session=False)
    return len(ids)


def _remove_artifacts(home: Path, uri: str) -> None:
    """A run's artifact folder goes when it lies under AIR_HOME (never followed through a
    link); elsewhere it is left to its owner."""
    path = uri[len("file://") :] if uri.startswith("file://") else uri
    root = os.path.realpath(home) + os.sep
    if path.startswith("/") and os.path.realpath(os.path.dirname(path)).startswith(root):
        import shutil

        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)  # fd-based: no link inside is followed


def _remove_folder(home: Path, job_id: str) -> None:
    """The job's folder goes: whatever stands at AIR_HOME/jobs/<id> is removed by descriptor
    (a link in its place, or inside it, is unlinked; its target is untouched)."""
    try:
        jobs = JobFolder.open(home / "jobs")
    except OSError:
        return
    with jobs:
        st = jobs.lstat(job_id)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            jobs.remove(job_id)
        else:
            jobs.unlink(job_id)


def _delete_run(home: Path, job_id: str, run_id: str, trackers: dict[str, Any]) -> bool:
    """Delete the job's MLflow run, then purge it where the store can (its rows, metrics and
    artifacts, as `mlflow gc` does); False when it was gone already."""
    from air_skills.runtime.runs.job_run import job_uri
    from air_skills.tracking.mlflow import MlflowTracker

    uri = job_uri(home, home / "jobs" / job_id)
    tracker = trackers.get(uri)
    if tracker is None:
        tracker = trackers[uri] = MlflowTracker(home, uri)
    client = tracker.client
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as exc:
        if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    if run.info.lifecycle_stage != "deleted":
        client.delete_run(run_id)
    _purge(home, client, run)
    return True


def _purge(home: Path, client: Any, run: Any) -> None:
    """Remove a deleted run for good where the store is local (sqlite): its artifacts when
    they lie under AIR_HOME, then its rows; a server keeps it deleted until its `mlflow gc`."""
    backend = getattr(getattr(client, "_tracking_client", None), "store", None)
    hard_delete = getattr(backend, "_hard_delete_run", None)
    if hard_delete is None:
        return
    _remove_artifacts(home, run.info.artifact_uri or "")
    hard_delete(run.info.run_id)
