"""A job's MLflow run at the end of an attempt: ended with the job's status and summary."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from air_skills.home import job_dir
from air_skills.runtime.process.faults import crash_point
from air_skills.runtime.results.outcomes import Outcome
from air_skills.runtime.results.summary_block import parse_summary, read_tail
from air_skills.runtime.runs.job_run import create_from_plan, drop_plan, job_uri, read_plan
from air_skills.runtime.runs.run_index import index_end
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store
from air_skills.status import JobStatus


def end_run(
    store: Store,
    row: JobRecord,
    spec: dict[str, Any],
    status: JobStatus,
    message: str,
    mlflow_ready: threading.Event | None,
) -> str:
    """End the MLflow run (with the summary block's values); returns the message to keep.

    ``mlflow_ready``: set when this process's MLflow warm-up (job_run.RunWork) is done.
    """
    values, bad = parse_summary(read_tail(row.log_path))
    if bad:
        message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
    run_id = row.run_id
    if not run_id and not spec.get("track", True):
        return message
    if mlflow_ready is not None:
        # Importing MLflow from two threads at once breaks it: let the warm-up finish.
        mlflow_ready.wait(timeout=60)
    try:
        from air_skills.tracking.writer import tracker_for

        jdir = job_dir(store.home, row.job_id)
        plan = read_plan(jdir)
        if not run_id:
            # Tracking was down at launch (or when the job started): create the run now.
            plan = plan or {
                "name": row.name,
                "experiment": spec.get("experiment"),
                "tags": spec.get("tags") or {},
            }
            run_id, exp_id = create_from_plan(store.home, row, plan)
            store.set_tracking(row.job_id, run_id, exp_id)
            drop_plan(jdir)
        uri = job_uri(store.home, jdir, plan)
        tracker_for(store.home, uri).finish_run(run_id, status.value, values)
    except Exception as exc:
        message += f" (MLflow run not ended: {str(exc)[:120]})"
        return message
    # The run's last values are in: the results index gets its final rows (a failure, or a
    # kill right here, leaves the job due: the next read catches up from MLflow).
    crash_point("end:run-ended")
    try:
        index_end(store, row.job_id, run_id, uri)
    except Exception:
        pass
    return message


@dataclass
class QueuedEnd:
    """A run's end queued in the home's tracking writer's spool (durable: a request file the
    next writer applies if this one dies), the job's record not waiting for it."""

    rid: str
    job_id: str


def queue_end(
    store: Store,
    row: JobRecord,
    spec: dict[str, Any],
    status: JobStatus,
    message: str,
    mlflow_ready: threading.Event | None,
) -> tuple[str, QueuedEnd | None]:
    """Queue the run's end (and then the results index's final rows, the writer's) for the
    home's writer, without waiting: returns the message to keep and what ``finish_end``
    waits for after the record. Where it cannot be queued so (the writer off, the run not made
    yet, or its completion by job_run.RunWork not done: its writes must go first), the run
    is ended here as ``end_run`` ends it, and None is returned."""
    from air_skills.tracking import writer

    ready = mlflow_ready is None or mlflow_ready.is_set()
    if not (writer.enabled() and row.run_id and ready):
        return end_run(store, row, spec, status, message, mlflow_ready), None
    values, bad = parse_summary(read_tail(row.log_path))
    if bad:
        message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
    jdir = job_dir(store.home, row.job_id)
    uri = job_uri(store.home, jdir, read_plan(jdir))
    try:
        rid = writer.submit(
            store.home, uri, "finish_run", row.run_id, status.value, values, index_job=row.job_id
        )
        writer.ensure_writer(store.home)
    except Exception:  # the spool cannot be written: end it here, as before
        return end_run(store, row, spec, status, message, mlflow_ready), None
    return message, QueuedEnd(rid, row.job_id)


def finish_end(store: Store, end: QueuedEnd) -> str:
    """After the job's record: wait for the queued end's reply; a note for the job's message
    if the run could not be ended ('' when it was)."""
    from air_skills.tracking import writer

    crash_point("end:recorded")
    try:
        writer.wait(store.home, end.rid)
    except Exception as exc:
        return f" (MLflow run not ended: {str(exc)[:120]})"
    crash_point("end:run-ended")
    return ""


def wait_run_end(store: Store, job_id: str, timeout_s: float) -> None:
    """After a cancel whose record is in: until its run's end, queued by its supervisor, has
    been applied (the writer writes the index's final rows after it: ``results_at``), or for
    ``timeout_s``. A cancel returns with the run KILLED, as when the run ended first."""
    from air_skills.polling import backoff

    for _ in backoff(first_s=0.005, factor=1.5, cap_s=0.1, timeout_s=max(0.0, timeout_s)):
        row = store.row(job_id)
        if row is None or not row.run_id or row.results_at is not None:
            return


def record_without_supervisor(store: Store, row: JobRecord, outcome: Outcome) -> bool:
    """Record the outcome of a RUNNING job that no supervisor will settle (it died, or the
    command could not be started), and end its MLflow run when the job ends.

    Only if the job is still RUNNING: of two processes that settle it, one writes. Returns
    whether this one did.
    """
    job_id = row.job_id
    with store.tx() as c:
        current = store.row_in(c, job_id)
        if current is None or current.status != "RUNNING":
            return False
        store.record_outcome(job_id, outcome, c=c)
    if outcome.action == "finish" and outcome.status is not None:
        # After the commit: the GPUs are free at once; the run's end is best effort.
        spec = current.spec_dict()
        note = end_run(store, current, spec, outcome.status, "", None)
        if note:
            store.append_message(job_id, note)
    return True
