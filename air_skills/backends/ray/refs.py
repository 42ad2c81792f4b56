"""A Ray job's references (submission ids, ``backend_ref``) and its per-job folder lock."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from air_skills.errors import NotFound
from air_skills.job_folder import JobFolder
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store


def submission_id(job_id: str, idempotency_key: str | None, attempt: int = 1) -> str:
    """Ray submission id: from the idempotency key when there is one, so retries dedupe."""
    if idempotency_key:
        if re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", idempotency_key):
            base = f"air-key-{idempotency_key}"
        else:
            base = "air-key-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
    else:
        base = f"air-{job_id}"
    return base if attempt <= 1 else f"{base}-a{attempt}"


def split_ref(ref: str | None) -> tuple[str | None, str | None]:
    if not ref or "@" not in ref:
        return None, None
    sid, address = ref.split("@", 1)
    return sid, address


@contextlib.contextmanager
def job_lock(job_dir: Path, block: bool = True, name: str = "ray.lock") -> Iterator[bool]:
    """One process at a time submits, settles or stops a given Ray job (or syncs its log)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    with JobFolder.open(job_dir) as folder:  # a link at the lock's name is not followed
        fd = folder.open_append(name)
    with os.fdopen(fd, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def reread(store: Store, job_id: str) -> JobRecord:
    """The job's current row (records are never deleted: a missing one is a broken home)."""
    row = store.row(job_id)
    if row is None:
        raise NotFound(f"no job {job_id!r}", hint="list jobs with `air ls`", job_id=job_id)
    return row
