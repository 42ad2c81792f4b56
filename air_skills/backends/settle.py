"""Ending a cluster job's record (Ray, Slurm): its MLflow run with the summary block, then
the record, so the run and the job never disagree."""

from __future__ import annotations

import contextlib
from pathlib import Path

from air_skills.gpu.node_hardware import mlflow_tag, settle_from_log
from air_skills.job_folder import JobFolder
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus


def short(exc: BaseException | str, limit: int = 300) -> str:
    """An exception (or text) on one line, cut to ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finish_stopped(
    rt: LaunchContext,
    row: JobRecord,
    status: JobStatus,
    message: str,
    failure_kind: str | None = None,
    done_marker: str | None = None,
) -> int:
    """End a job that stopped without an exit of its own: CANCELLED with the reason when AIR
    asked to cancel it, else ``status`` with ``message``."""
    if row.stop_request == "cancel":
        return finish(
            rt, row, JobStatus.CANCELLED, f"CANCELLED: {row.stop_reason}", done_marker=done_marker
        )
    return finish(rt, row, status, message, failure_kind=failure_kind, done_marker=done_marker)


def finish(
    rt: LaunchContext,
    row: JobRecord,
    status: JobStatus,
    message: str,
    exit_code: int | None = None,
    failure_kind: str | None = None,
    done_marker: str | None = None,
    signal: str | None = None,
) -> int:
    """End the MLflow run (with the summary block's values), then the record; ``done_marker``
    (a file name) is touched beside the log once the record is final."""
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
            signal=signal,
            failure_kind=failure_kind,
            c=c,
        )
    if done and done_marker:
        with contextlib.suppress(OSError):
            with JobFolder.open(Path(row.log_path).parent) as folder:
                folder.touch(done_marker)  # made by descriptor: a link there is not followed
    return int(done)


def end_run(rt: LaunchContext, row: JobRecord, status: JobStatus, message: str) -> str:
    from air_skills.runtime.results.summary_block import parse_summary, read_tail

    values, bad = parse_summary(read_tail(row.log_path))
    if bad:
        message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
    if not row.run_id:
        return message
    from air_skills.runtime.runs.job_run import complete_from_plan

    try:  # a launcher killed before it handed its claimed run's plan on (slurm/backend.py)
        complete_from_plan(rt.home, row, rt.tracker)
    except Exception:
        pass
    settle_from_log(row.log_path)  # a Ray node's hardware line (Slurm's runner wrote the file)
    mlflow_tag(rt.tracker, row.run_id, row.log_path)
    try:
        rt.tracker.finish_run(row.run_id, status.value, values)
    except Exception as exc:
        message += f" (MLflow run not ended: {short(exc)[:120]})"
        return message
    from air_skills.runtime.runs.run_index import index_end

    try:  # the results index's final rows (left due on a failure: a read catches up)
        index_end(rt.store, row.job_id, row.run_id, rt.tracker.uri)
    except Exception:
        pass
    return message
