"""A launch in progress, on disk: who is building which job folder, so a crash is cleaned up.

Before anything of a new job exists, its launcher writes ``jobs/.launching/<job_id>.json``
(its pid and start time, later its MLflow run; a batch's group: one intent listing its jobs,
``write_group``), and builds the job's folder as
``jobs/.tmp-<job_id>``. The folder is renamed to ``jobs/<job_id>`` inside the transaction
that records the job, and the intent is removed after the commit. An intent whose launcher
is dead is a crashed launch: runtime/launch/orphans.py removes what it left. Stdlib only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from air_skills.home import JOB_ID_RE, check_job_id, read_job_json
from air_skills.runtime.process import proc

INTENTS = ".launching"  # under jobs/: names that are not job ids, so no reader of jobs/ sees them
BUILD_PREFIX = ".tmp-"


def intents_dir(home: Path) -> Path:
    return home / "jobs" / INTENTS


def build_dir(home: Path, job_id: str) -> Path:
    """Where the job's folder is made before its record is committed."""
    return home / "jobs" / (BUILD_PREFIX + check_job_id(job_id))


def _path(home: Path, job_id: str) -> Path:
    return intents_dir(home) / f"{check_job_id(job_id)}.json"


def write(home: Path, job_id: str, **fields: Any) -> None:
    """Write (or rewrite) this process's intent to launch ``job_id``, with ``fields``."""
    rewrite(home, job_id, {"pid": os.getpid(), "start": proc.own_start(), **fields})


def write_group(home: Path, job_ids: list[str]) -> str:
    """One intent for a batch's group of launches (LocalBackend.queue_group), written before
    any of their folders exists: ``group`` lists ``job_ids``, each built as its own launch
    but with no intent of its own (one file per group, not one per job). Named by an id of
    its own that no job takes; returns it (``remove`` it once every job is recorded or
    discarded). A dead launcher's group is swept job by job (orphans.py)."""
    name = "job-" + os.urandom(5).hex()
    write(home, name, group=[check_job_id(j) for j in job_ids])
    return name


def rewrite(home: Path, job_id: str, intent: dict[str, Any]) -> None:
    """Write ``intent`` atomically: a reader never sees half of it."""
    path = _path(home, job_id)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except FileNotFoundError:  # the first launch in this home
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:  # one write of json.dumps (json.dump to a file object: Python's slow encoder)
        os.write(fd, json.dumps(intent).encode())
    finally:
        os.close(fd)
    os.replace(part, path)


def read(home: Path, job_id: str) -> dict[str, Any] | None:
    """The intent, or None when there is none (or it cannot be read)."""
    try:
        intent = read_job_json(_path(home, job_id))
    except (OSError, ValueError):
        return None
    return intent if isinstance(intent, dict) else None


def remove(home: Path, job_id: str) -> None:
    _path(home, job_id).unlink(missing_ok=True)


def pending(home: Path) -> list[str]:
    """The job ids of every launch on record, finished or not (a small folder: one per
    launch in flight, plus any a crash left)."""
    try:
        names = os.listdir(intents_dir(home))
    except FileNotFoundError:
        return []
    return [n[: -len(".json")] for n in names if n.endswith(".json") and JOB_ID_RE.match(n[:-5])]


def stale_parts(home: Path, older_than_s: float) -> list[Path]:
    """Half-written intents (``.part``) left by a launcher killed while writing one."""
    folder = intents_dir(home)
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".part")]
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        try:
            if os.stat(folder / name).st_mtime < time.time() - older_than_s:
                out.append(folder / name)
        except FileNotFoundError:
            pass
    return out


def launcher_alive(intent: dict[str, Any]) -> bool:
    """Whether the process that wrote the intent still runs (pid and start time)."""
    pid = intent.get("pid")
    return isinstance(pid, int) and proc.alive(pid, intent.get("start") or None)
