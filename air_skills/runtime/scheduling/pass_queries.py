"""The scheduling pass's reads and writes, inside its transaction: the SQL the pass needs."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills.runtime.store.records import JOB_COLUMNS, JobRecord, record_in_home

# Columns a pass reads: no spec JSON parsed in Python, only what the scheduler needs.
PASS_COLUMNS = (
    "job_id, seq, gpus_requested, priority, preemptible, created_at, started_at, project,"
    " borrowing, stop_request, gpus, message, supervisor_pid, supervisor_start, job_class,"
    " json_extract(spec, '$.timeout_min') AS timeout_min, json_extract(spec, '$.cpus') AS want_cpus"
    ", coalesce(json_extract(spec, '$.track'), 1) AS track"
)


def quotas(c: sqlite3.Connection) -> dict[str, int]:
    """{project: GPUs} for the projects with a quota."""
    return {r["project"]: r["gpus"] for r in c.execute("SELECT * FROM quotas")}


def running(c: sqlite3.Connection) -> list[sqlite3.Row]:
    """The local backend's RUNNING jobs."""
    return c.execute(
        f"SELECT {PASS_COLUMNS} FROM jobs WHERE status='RUNNING' AND backend='local'"
    ).fetchall()


def queued_job(c: sqlite3.Connection, job_id: str) -> list[sqlite3.Row]:
    """The job, if it is QUEUED (no row otherwise)."""
    return c.execute(
        f"SELECT {PASS_COLUMNS} FROM jobs WHERE job_id=? AND status='QUEUED'", (job_id,)
    ).fetchall()


def queued(
    c: sqlite3.Connection, window: int, free_gpus: int = 0, per_project: bool = False
) -> list[sqlite3.Row]:
    """The head of the queue by priority then age (``window`` jobs), and past it the head of
    each resource shape that can start now: CPU jobs, and each GPU count up to ``free_gpus``
    (the idle GPUs); with ``per_project`` (quotas) the head of each project's queue too.

    Each is an index range (jobs_queue, jobs_queue_shape, jobs_queue_project), so a pass costs
    the same at 100 or 10,000 queued jobs (issue 41.4), while a job that fits the idle GPUs is
    seen however deep it waits behind jobs that do not fit.
    """
    head = c.execute(
        f"SELECT {PASS_COLUMNS} FROM jobs INDEXED BY jobs_queue"
        " WHERE status='QUEUED' AND backend='local' ORDER BY priority DESC, seq LIMIT ?",
        (window,),
    ).fetchall()
    if len(head) < window:  # the whole queue is in view
        return head
    seen = {r["seq"] for r in head}
    extra: list[sqlite3.Row] = []
    for shape in [0, *(s for s in queued_shapes(c, free_gpus) if s > 0)]:
        extra += c.execute(
            f"SELECT {PASS_COLUMNS} FROM jobs INDEXED BY jobs_queue_shape WHERE status='QUEUED'"
            " AND gpus_requested=? AND backend='local' ORDER BY priority DESC, seq LIMIT ?",
            (shape, window),
        ).fetchall()
    if per_project:
        for project in queued_projects(c):
            extra += c.execute(
                f"SELECT {PASS_COLUMNS} FROM jobs INDEXED BY jobs_queue_project"
                " WHERE status='QUEUED' AND project=? AND backend='local'"
                " ORDER BY priority DESC, seq LIMIT ?",
                (project, window),
            ).fetchall()
    for row in extra:
        if row["seq"] not in seen:
            seen.add(row["seq"])
            head.append(row)
    return sorted(head, key=lambda r: r["seq"])


def queued_shapes(c: sqlite3.Connection, most: int) -> list[int]:
    """The distinct GPU counts of queued jobs, up to ``most``: one index seek each."""
    shapes: list[int] = []
    last = -1
    while True:
        row = c.execute(
            "SELECT gpus_requested FROM jobs INDEXED BY jobs_queue_shape WHERE status='QUEUED'"
            " AND gpus_requested > ? ORDER BY gpus_requested LIMIT 1",
            (last,),
        ).fetchone()
        if row is None or row[0] > most:
            return shapes
        last = row[0]
        shapes.append(last)


def queued_projects(c: sqlite3.Connection) -> list[str]:
    """The distinct projects of queued jobs: one index seek each."""
    projects: list[str] = []
    while True:
        row = c.execute(
            "SELECT project FROM jobs INDEXED BY jobs_queue_project WHERE status='QUEUED'"
            " AND project > ? ORDER BY project LIMIT 1",
            (projects[-1] if projects else "",),
        ).fetchone()
        if row is None:
            return projects
        projects.append(row[0])


def cpu_job_queued(c: sqlite3.Connection) -> bool:
    """Whether any CPU-only job of the local backend is QUEUED."""
    return bool(
        c.execute(
            "SELECT 1 FROM jobs INDEXED BY jobs_queue_cpu WHERE status='QUEUED'"
            " AND gpus_requested=0 AND backend='local' ORDER BY priority DESC, seq LIMIT 1"
        ).fetchone()
    )


def set_borrowing(c: sqlite3.Connection, job_id: str, borrowing: bool) -> None:
    """Relabel a RUNNING job as borrowing idle GPUs beyond its project's quota, or not."""
    c.execute(
        "UPDATE jobs SET borrowing=? WHERE job_id=? AND status='RUNNING'",
        (int(borrowing), job_id),
    )


def set_waiting_reason(c: sqlite3.Connection, job_id: str, message: str) -> None:
    """Write a QUEUED job's message (why it waits)."""
    c.execute("UPDATE jobs SET message=? WHERE job_id=? AND status='QUEUED'", (message, job_id))


def given_job(
    read: Callable[[str, tuple[Any, ...]], list[sqlite3.Row]], pid: int, home: Path
) -> JobRecord | None:
    """The RUNNING job that a pass gave to the idle supervisor ``pid`` (its command not yet
    started), read through ``read`` (Store.read); None if none."""
    rows = read(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE status='RUNNING' AND backend='local'"
        " AND supervisor_pid=? AND job_pid IS NULL ORDER BY seq LIMIT 1",
        (pid,),
    )
    return record_in_home(rows[0], home) if rows else None
