"""Ending a Ray job's record: its MLflow run (with the summary block), then the record."""

from __future__ import annotations

import contextlib
from pathlib import Path

from air_skills.backends.ray.sdk import short
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus


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
    """End a job that stopped without an exit of its own: CANCELLED with the reason when AIR
    asked to cancel it, else ``status`` with ``message``."""
    if row.stop_request == "cancel":
        return finish(rt, row, JobStatus.CANCELLED, f"CANCELLED: {row.stop_reason}")
    return finish(rt, row, status, message, failure_kind=failure_kind)


def finish(
    rt: LaunchContext,
    row: JobRecord,
    status: JobStatus,
    message: str,
    exit_code: int | None = None,
    failure_kind: str | None = None,
) -> int:
    """End the MLflow run (with the summary block's values), then the record."""
    job_id = row.job_id
    current = rt.store.row(job_id)
    if current is None or JobStatus(current.status).is_terminal():
        return 0
    message = end_run(rt, row, status, message)
    with rt.store.tx() as c:
        if (
            current.status == "QUEUED"
            and status != JobStatus.CANCELLED
            and (current.backend_ref and exit_code is not None)
        ):
            # It ran between two looks: record that it started.
            rt.store.mark_running(c, job_id, [], current.cpus or 1, False)
        done = rt.store.finish(
            job_id,
            status,
            message=message,
            exit_code=exit_code,
            failure_kind=failure_kind,
            c=c,
        )
    if done:
        with contextlib.suppress(OSError):
            (Path(row.log_path).parent / "ray-logs.done").touch()
    return int(done)


def end_run(rt: LaunchContext, row: JobRecord, status: JobStatus, message: str) -> str:
    from air_skills.runtime.results.summary_block import parse_summary, read_tail

    values, bad = parse_summary(read_tail(row.log_path))
    if bad:
        message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
    if not row.run_id:
        return message
    try:
        rt.tracker.finish_run(row.run_id, status.value, values)
    except Exception as exc:
        message += f" (MLflow run not ended: {short(exc)[:120]})"
    return message
