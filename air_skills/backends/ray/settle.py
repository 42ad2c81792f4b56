"""Ending a Ray job's record: its MLflow run (with the summary block), then the record."""

from __future__ import annotations

from air_skills.backends import settle
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus

DONE = "ray-logs.done"  # beside the log: the final output was fetched (ray/logs.py)


def settle_gone(rt: LaunchContext, row: JobRecord, what: str) -> int:
    """End a job whose Ray job is gone (its outcome unknown): an infra failure."""
    return finish_stopped(
        rt,
        row,
        JobStatus.FAILED,
        f"FAILED (infra): {what}; its outcome is unknown. Next: read what output was kept"
        f" with `air logs {row.job_id}`, then relaunch",
        failure_kind="infra",
    )


def finish_stopped(
    rt: LaunchContext,
    row: JobRecord,
    status: JobStatus,
    message: str,
    failure_kind: str | None = None,
) -> int:
    """End a job that stopped without an exit of its own (see backends/settle.py)."""
    return settle.finish_stopped(rt, row, status, message, failure_kind, done_marker=DONE)


def finish(
    rt: LaunchContext,
    row: JobRecord,
    status: JobStatus,
    message: str,
    exit_code: int | None = None,
    failure_kind: str | None = None,
) -> int:
    """End the MLflow run (with the summary block's values), then the record."""
    return settle.finish(rt, row, status, message, exit_code, failure_kind, done_marker=DONE)
