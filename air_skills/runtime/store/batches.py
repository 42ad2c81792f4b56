"""Batches: the jobs of one ``launch_jobs`` call or one ``air launch`` sweep under one id, so that
``list_jobs``, ``wait_for_jobs`` and ``cancel_job`` follow 1,000 jobs by a name. A job may be in
several batches (a duplicate item holds the job that already ran it)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence

from air_skills.runtime.store.db import Database

# A jobs-table filter: the batch's jobs (one argument, the batch id).
IN_BATCH = "job_id IN (SELECT job_id FROM batch_jobs WHERE batch_id=?)"
BATCH_RE = re.compile(r"batch-[0-9a-z]{4,40}")


def new_batch_id() -> str:
    """``batch-<time><random>``: sortable by creation, unique without a lock."""
    return f"batch-{int(time.time()):x}{os.urandom(4).hex()}"


def is_batch_id(text: str) -> bool:
    return BATCH_RE.fullmatch(text) is not None


def add_jobs(db: Database, batch_id: str, job_ids: Sequence[tuple[int, str]]) -> None:
    """Record (item, job_id) pairs as the batch's, in one transaction (again: no change)."""
    if not job_ids:
        return
    with db.tx() as c:
        c.executemany(
            "INSERT OR IGNORE INTO batch_jobs (batch_id, job_id, item) VALUES (?, ?, ?)",
            [(batch_id, job_id, item) for item, job_id in job_ids],
        )


def job_ids(db: Database, batch_id: str) -> list[str]:
    """The batch's jobs in item order ([] for an unknown batch)."""
    rows = db.read(
        "SELECT job_id FROM batch_jobs WHERE batch_id=? ORDER BY item, job_id", (batch_id,)
    )
    return [r["job_id"] for r in rows]
