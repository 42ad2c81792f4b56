"""Rebuilding job records from the job folders (`air doctor --rebuild`): after the state
database was lost, restored from an older backup (jobs launched since are unknown to it), or
replaced by another home's (moved aside first, see home_id.py).

Job folders are untrusted input: each ``record.json`` is read non-blocking, regular files
only, under a size cap (results/folder_files.py); a record that does not validate skips its folder
with the reason, never the whole rebuild; a job's log is always its own folder's output.log,
whatever the record says.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.errors import AirError
from air_skills.home import FOLDER_RECORD, JOB_ID_RE
from air_skills.runtime.results.folder_files import Unreadable, read_regular
from air_skills.runtime.store.home_id import db_home_id, read_home_id
from air_skills.runtime.store.store import Store
from air_skills.status import PRIORITY_RANK, JobStatus
from air_skills.vocabulary import NAME_RE

MAX_RECORD_BYTES = 16 << 20  # a record holds the spec, its patch (up to 4 MB) included
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
UNKNOWN_SPEC: dict[str, Any] = {"command": ["(unknown)"], "gpus": 0}
# Validates a stored spec (the Client passes JobSpec's check): the spec to record, or
# ValueError saying why not. The runtime itself is pydantic-free.
SpecCheck = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Found:
    """One job folder the database does not know, and the record it will get."""

    job_id: str
    spec: dict[str, Any]
    name: str
    project: str = "default"
    run_id: str | None = None
    experiment_id: str | None = None
    note: str = ""


@dataclass
class Plan:
    """What a rebuild finds: folders to record, folders skipped (with why), the database."""

    found: list[Found] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    known: int = 0
    other_home: bool = False


def log_path_of(home: Path, job_id: str) -> str:
    """A job's log: always its own folder's output.log (never a path read from a record)."""
    return os.path.join(home, "jobs", job_id, "output.log")


def known_jobs(db_path: Path) -> tuple[set[str], str | None]:
    """The job ids in the database and the home id it was made for, read-only (a dry run
    writes nothing); empty when there is no database or it cannot be read."""
    if not db_path.is_file():
        return set(), None
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return set(), None
    try:
        ids = {r[0] for r in conn.execute("SELECT job_id FROM jobs")}
    except sqlite3.Error:
        ids = set()
    try:
        return ids, db_home_id(conn)
    finally:
        conn.close()


def _checked_spec(raw: Any, check: SpecCheck | None) -> dict[str, Any]:
    """The record's spec if it is one the store can hold; ValueError saying why not."""
    if not isinstance(raw, dict):
        raise ValueError("its spec is not a mapping")
    problems = []
    command = raw.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        problems.append("no command (a list of strings)")
    if raw.get("priority", "normal") not in PRIORITY_RANK:
        shown = str(raw.get("priority"))[:40]
        problems.append(f"priority {shown!r} is not one of {', '.join(PRIORITY_RANK)}")
    if problems:
        raise ValueError("its spec has " + "; ".join(problems))
    spec = check(raw) if check is not None else raw
    return {**spec, "idempotency_key": None}  # a retried launch makes a new job


def _text(value: Any, pattern: re.Pattern[str]) -> str | None:
    return value if isinstance(value, str) and pattern.match(value) else None


def read_folder(jdir: Path, check: SpecCheck | None) -> Found:
    """The record a job folder gives; ValueError (its reason) when the folder is skipped."""
    job_id = jdir.name
    try:
        data = read_regular(jdir / FOLDER_RECORD, MAX_RECORD_BYTES)
    except Unreadable as exc:
        if not (jdir / FOLDER_RECORD).exists() and not (jdir / FOLDER_RECORD).is_symlink():
            return Found(job_id, dict(UNKNOWN_SPEC), job_id, note="no record.json")
        raise ValueError(str(exc)) from None
    try:
        record = json.loads(data)
    except ValueError:  # cut short by a crash mid-write: the folder is still a job
        return Found(job_id, dict(UNKNOWN_SPEC), job_id, note="record.json is not JSON")
    if not isinstance(record, dict):
        raise ValueError("record.json is not a JSON object")
    spec = _checked_spec(record.get("spec"), check)
    name = record.get("name")
    return Found(
        job_id,
        spec,
        name[:200] if isinstance(name, str) and name.strip() else job_id,
        project=_text(record.get("project"), NAME_RE) or "default",
        run_id=_text(record.get("run_id"), _RUN_ID),
        experiment_id=_text(record.get("experiment_id"), _RUN_ID),
    )


def plan_rebuild(home: Path, check: SpecCheck | None = None) -> Plan:
    """What a rebuild would do, writing nothing."""
    known, db_id = known_jobs(home / "air.db")
    file_id = read_home_id(home)
    plan = Plan(other_home=bool(db_id and file_id and db_id != file_id))
    if not plan.other_home:
        plan.known = len(known)
    jobs = home / "jobs"
    for name in sorted(os.listdir(jobs)) if jobs.is_dir() else []:
        if not JOB_ID_RE.match(name) or (name in known and not plan.other_home):
            continue
        try:
            if not stat.S_ISDIR(os.lstat(jobs / name).st_mode):
                raise ValueError("it is not a folder")
            plan.found.append(read_folder(jobs / name, check))
        except (ValueError, TypeError, OSError) as exc:
            plan.skipped.append({"job_id": name, "reason": str(exc) or type(exc).__name__})
    return plan


def _move_aside(db_path: Path) -> str:
    """Move another home's database (and its WAL files) aside; returns where it went."""
    aside = Path(f"{db_path}.other-home-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    for suffix in ("-wal", "-shm", ""):
        src = Path(f"{db_path}{suffix}")
        if src.exists():
            os.replace(src, f"{aside}{suffix}")
    return str(aside)


def _record(store: Store, found: Found) -> None:
    """One rebuilt job: QUEUED, then FAILED (infra) at once, as its outcome is unknown."""
    with store.tx() as c:
        store.queue(
            found.spec,
            found.job_id,
            log_path_of(store.home, found.job_id),
            found.name,
            found.run_id,
            found.experiment_id,
            message="QUEUED: record rebuilt from its folder",
            c=c,
            project=found.project,
        )
        store.finish(
            found.job_id,
            JobStatus.FAILED,
            message=(
                "FAILED (infra): the state database lost this job's record; rebuilt from its"
                " folder, its outcome is unknown"
                + (f" ({found.note})" if found.note else "")
                + f". Next: read `air logs {found.job_id}`, relaunch it if needed"
            ),
            failure_kind="infra",
            c=c,
        )


def rebuild(home: Path, dry_run: bool = False, check: SpecCheck | None = None) -> dict[str, Any]:
    """Record every job folder the database does not know (see the module docstring)."""
    plan = plan_rebuild(home, check)
    result: dict[str, Any] = {
        "home": str(home),
        "dry_run": dry_run,
        "known": plan.known,
        "other_home_db": plan.other_home,
        "moved_aside": None,
        "rebuilt": [f.job_id for f in plan.found],
        "skipped": plan.skipped,
    }
    if dry_run:
        return result
    if plan.other_home:
        result["moved_aside"] = _move_aside(home / "air.db")
    store = Store(home, rebuilding=True)
    try:
        known = {r["job_id"] for r in store.read("SELECT job_id FROM jobs")}
        rebuilt = []
        for found in plan.found:
            if found.job_id in known:
                continue  # recorded meanwhile (a launch that was finishing)
            try:
                _record(store, found)
            except (AirError, sqlite3.Error, KeyError, TypeError, ValueError) as exc:
                reason = f"recording it failed: {exc}"
                result["skipped"].append({"job_id": found.job_id, "reason": reason})
                continue
            rebuilt.append(found.job_id)
        result["rebuilt"] = rebuilt
        return result
    finally:
        store.close()


SETTLE_S = 120.0  # a launch renames its folder into place just before its record commits


def records_check(store: Store) -> dict[str, str]:
    """`air doctor`'s check that the database and the job folders agree: folders it does not
    know (an older air.db restored, or another home's) and records without a folder here."""
    jobs = store.home / "jobs"
    known = {r["job_id"] for r in store.read("SELECT job_id FROM jobs")}
    folders = {n for n in os.listdir(jobs) if JOB_ID_RE.match(n)}
    now = time.time()
    unknown = sorted(n for n in folders - known if now - _mtime(jobs / n) > SETTLE_S)
    missing = sorted(known - folders)
    name = "job records"
    if not unknown and not missing:
        return {"name": name, "status": "ok", "detail": f"{len(known)} jobs, each with its"
                " folder", "next": ""}  # fmt: skip
    said = []
    if unknown:
        said.append(f"{len(unknown)} job folders the database does not know ({_few(unknown)}):"
                    " an older air.db was restored, or another home's")  # fmt: skip
    if missing:
        said.append(f"{len(missing)} records have no folder in {jobs} ({_few(missing)}):"
                    " folders deleted, or the database is another home's")  # fmt: skip
    return {
        "name": name,
        "status": "warn",
        "detail": "; ".join(said),
        "next": "record the folders with `air doctor --rebuild` (--dry-run first shows the"
        " plan); with another home's air.db, move it aside first"
        if unknown
        else "",
    }


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _few(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def rebuild_records(home: Path) -> list[str]:
    """Add a record for every job folder that has none; returns the job ids rebuilt."""
    return list(rebuild(home)["rebuilt"])
