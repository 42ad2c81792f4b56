"""A job's MLflow run at the ends of an attempt: warmed up at its start, ended at its exit."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from air_skills.runtime.outcomes import Outcome
from air_skills.runtime.store import Store
from air_skills.runtime.summary_block import parse_summary, read_tail
from air_skills.status import JobStatus


def warm_mlflow(home: Path, row: Any) -> None:
    """Import MLflow while the job runs, so ending the run at exit takes milliseconds.

    The attempt tag says which start of the job the run's latest values come from.
    """
    try:
        from air_skills.tracking.mlflow import MlflowTracker

        MlflowTracker(home).set_attempt(row["run_id"], row["attempts"])
    except Exception:
        pass


def end_run(
    store: Store,
    row: Any,
    spec: dict[str, Any],
    status: JobStatus,
    message: str,
    warm: threading.Thread | None,
) -> str:
    """End the MLflow run (with the summary block's values); returns the message to keep.

    ``warm``: the thread running warm_mlflow, if any (waited for first).
    """
    values, bad = parse_summary(read_tail(row["log_path"]))
    if bad:
        message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
    run_id = row["run_id"]
    if not run_id and not spec.get("track", True):
        return message
    if warm is not None:
        # Importing MLflow from two threads at once breaks it: let the warm-up finish.
        warm.join(timeout=60)
    try:
        from air_skills.tracking.mlflow import MlflowTracker

        tracker = MlflowTracker(store.home)
        if not run_id:
            # Tracking was down at launch: create the run now, when possible.
            run_id, exp_id = tracker.create_run(
                job_id=row["job_id"],
                name=row["name"],
                experiment=spec.get("experiment"),
                config=spec.get("config") or {},
                tags=spec.get("tags") or {},
            )
            store.set_tracking(row["job_id"], run_id, exp_id)
        tracker.finish_run(run_id, status.value, values)
    except Exception as exc:
        message += f" (MLflow run not ended: {str(exc)[:120]})"
    return message


def record_without_supervisor(store: Store, row: Any, outcome: Outcome) -> bool:
    """Record the outcome of a RUNNING job that no supervisor will settle (it died, or the
    command could not be started), and end its MLflow run when the job ends.

    Only if the job is still RUNNING: of two processes that settle it, one writes. Returns
    whether this one did.
    """
    job_id = row["job_id"]
    with store.tx() as c:
        current: sqlite3.Row | None = store.row_in(c, job_id)
        if current is None or current["status"] != "RUNNING":
            return False
        store.record_outcome(job_id, outcome, c=c)
    if outcome.action == "finish" and outcome.status is not None:
        # After the commit: the GPUs are free at once; the run's end is best effort.
        spec = json.loads(current["spec"])
        note = end_run(store, current, spec, outcome.status, "", None)
        if note:
            store.append_message(job_id, note)
    return True
