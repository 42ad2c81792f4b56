"""A job's MLflow run on the supervisor's side: made or completed where MLflow is loaded.

A launch that keeps MLflow out of its process (the CLI) writes the run's plan in the job's
folder (``run_plan.json``: tracking URI, experiment, name, tags, dirty diff) and either
claims a spare run (runtime/runs/spare_runs.py), creates a bare one over REST (a tracking server),
or leaves the run to be made here (sqlite, no spare). Then the supervisor:
- with a run id: ``RunWork`` gives the run its name, tags, params and data inputs in a
  thread while the job runs (the job logs into it from its first metric meanwhile);
- without one (pending): ``make_pending_run`` creates it before the command starts, so the
  job knows its run id from its first instruction: written into MLflow's sqlite tables
  (tracking/sqlite_runs.py, milliseconds) and then completed as a spare is, or, on any other
  store, made through MLflow (only this job waits for its import).
Either way the plan is removed once applied, and the thread then tops up the spare runs.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from air_skills.home import job_dir, read_job_json, read_launch_env
from air_skills.job_folder import write_fresh
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store

PLAN = "run_plan.json"  # in the job's folder until the supervisor has applied it
# The MLflow work waits this long after the command's start: on a small machine it would
# otherwise slow the job's own start, and the job's first metrics need none of it.
START_DELAY_S = 0.05
PENDING_NOTE = "MLflow run: made by the job's supervisor before the command starts"


def write_plan(jdir: Path, plan: dict[str, Any]) -> None:
    """The run's plan in a launch's build folder (``write_fresh``)."""
    write_fresh(jdir, PLAN, json.dumps(plan, separators=(",", ":")))  # never through a link


def read_plan(jdir: Path) -> dict[str, Any] | None:
    try:
        plan = read_job_json(jdir / PLAN)
    except (OSError, ValueError):
        return None
    return plan if isinstance(plan, dict) else None


def drop_plan(jdir: Path) -> None:
    (jdir / PLAN).unlink(missing_ok=True)


def is_pending(home: Path, row: JobRecord) -> bool:
    """Whether the job's run is still to be made by its supervisor (before its command)."""
    return not row.run_id and (job_dir(home, row.job_id) / PLAN).exists()


def job_uri(home: Path, jdir: Path, plan: dict[str, Any] | None = None) -> str:
    """The tracking URI the job was launched with (not this process's, which may differ)."""
    if plan and plan.get("uri"):
        return str(plan["uri"])
    launched = read_launch_env(jdir) or {}
    from air_skills.tracking.mlflow import tracking_uri

    return launched.get("MLFLOW_TRACKING_URI") or tracking_uri(home)


def _tracker(home: Path, jdir: Path, plan: dict[str, Any] | None) -> Any:
    from air_skills.tracking.writer import tracker_for

    return tracker_for(home, job_uri(home, jdir, plan))  # the home's writer, or MLflow here


def _run_tags(row: JobRecord, plan: dict[str, Any]) -> dict[str, str]:
    return {
        **(plan.get("tags") or {}),
        "air.job_id": row.job_id,
        "air.attempt": str(max(1, row.attempts or 1)),
    }


def _config(jdir: Path) -> dict[str, Any]:
    try:
        config = read_job_json(jdir / "config.json")
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _log_extras(tracker: Any, run_id: str, row: JobRecord, plan: dict[str, Any]) -> None:
    """The run's data inputs and dirty diff (both best effort, as at launch before)."""
    data = row.spec_dict().get("data") or []
    if data and hasattr(tracker, "log_data_inputs"):  # the writer fingerprints and logs them
        tracker.log_data_inputs(run_id, data)
    elif data:
        from air_skills.tracking.data import log_inputs

        log_inputs(tracker, run_id, data)
    if plan.get("diff"):
        from air_skills.runtime.code.job_code import DIFF_ARTIFACT

        tracker.log_text(run_id, plan["diff"], DIFF_ARTIFACT)


def create_from_plan(home: Path, row: JobRecord, plan: dict[str, Any]) -> tuple[str, str]:
    """Create the job's run as its plan says; (run_id, experiment_id). May raise."""
    jdir = job_dir(home, row.job_id)
    tracker = _tracker(home, jdir, plan)
    run_id, exp_id = tracker.create_run(
        job_id=row.job_id,
        name=plan.get("name") or row.name,
        experiment=plan.get("experiment"),
        config=_config(jdir),
        tags={**(plan.get("tags") or {}), "air.attempt": str(max(1, row.attempts or 1))},
    )
    try:
        _log_extras(tracker, run_id, row, plan)
    except Exception:
        pass  # the run exists and the job logs into it: inputs and diff are extras
    return run_id, exp_id


def make_pending_run(store: Store, row: JobRecord) -> JobRecord:
    """Create the run of a pending job before its command starts; the job's fresh record.

    Tracking down: the job runs without a run (its note says why), as a launch would have
    left it; end_run tries once more at the job's end.
    """
    row = make_run_in_sql(store, row)
    if row.run_id:
        return row
    jdir = job_dir(store.home, row.job_id)
    plan = read_plan(jdir)
    if plan is None:
        return row
    try:
        run_id, exp_id = create_from_plan(store.home, row, plan)
    except Exception as exc:
        message = getattr(exc, "message", None) or str(exc)[:200]
        store.set_tracking_note(row.job_id, f"tracking unavailable: {message}")
        return store.row(row.job_id) or row
    store.set_tracking(row.job_id, run_id, exp_id)
    drop_plan(jdir)
    return store.row(row.job_id) or row


def make_run_in_sql(store: Store, row: JobRecord) -> JobRecord:
    """A pending job's run written into MLflow's sqlite tables (tracking/sqlite_runs.py: no
    MLflow import, milliseconds); the job's fresh record. The plan stays: RunWork completes
    the run from it (params, tags, inputs) as it does a claimed spare. Unchanged where the
    store is not one to write so: ``make_pending_run`` then goes through MLflow."""
    from air_skills.tracking.mlflow import DEFAULT_EXPERIMENT, MlflowTracker
    from air_skills.tracking.sqlite_runs import create_run

    if row.run_id:  # most jobs: made at launch or claimed; no plan to read
        return row
    jdir = job_dir(store.home, row.job_id)
    plan = read_plan(jdir)
    if plan is None:
        return row
    uri = job_uri(store.home, jdir, plan)
    experiment = plan.get("experiment") or DEFAULT_EXPERIMENT
    tracker = MlflowTracker(store.home, uri)
    if not tracker.store_without_import():  # a fresh home's store: copied from the template
        return row
    made = create_run(
        uri,
        experiment,
        tracker.artifact_root(experiment),
        name=plan.get("name") or row.name,
        tags=_run_tags(row, plan),
    )
    if made is None:
        return row
    store.set_tracking(row.job_id, *made)
    return store.row(row.job_id) or row


def complete_from_plan(home: Path, row: JobRecord, tracker: Any = None) -> bool:
    """Give a run made ahead (a spare claimed at launch) the job's name, params, tags, data
    inputs and diff from its plan, then drop the plan; False when there is none to apply.
    ``tracker``: the job's own (``_tracker``) unless given, e.g. the writer's, queued."""
    jdir = job_dir(home, row.job_id)
    plan = read_plan(jdir)
    if plan is None or not row.run_id:
        return False
    tracker = tracker or _tracker(home, jdir, plan)
    _fill_from_plan(tracker, jdir, row, plan)
    _log_extras(tracker, row.run_id, row, plan)
    return True


def _fill_from_plan(tracker: Any, jdir: Path, row: JobRecord, plan: dict[str, Any]) -> None:
    """The run's name, params and tags from the job's plan; then the plan is dropped."""
    tracker.fill_run(
        row.run_id,
        name=plan.get("name") or row.name,
        config=_config(jdir),
        tags=_run_tags(row, plan),
    )
    drop_plan(jdir)


def queued_tracker(home: Path, row: JobRecord) -> Any:
    """The job's tracker for writes its launcher hands on without waiting: the home's writer
    with queued requests (tracking/writer.py, crash-safe in its spool), else MLflow here."""
    from air_skills.tracking import writer

    jdir = job_dir(home, row.job_id)
    if writer.enabled():
        return writer.RemoteTracker(home, job_uri(home, jdir, read_plan(jdir)), wait=False)
    return _tracker(home, jdir, read_plan(jdir))


def finish_unstarted(home: Path, row: JobRecord, status: str) -> None:
    """End the run of a job that never started (cancelled while queued), completed from its
    plan first when it was made ahead. Raises when tracking is unavailable."""
    jdir = job_dir(home, row.job_id)
    plan = read_plan(jdir)
    tracker = _tracker(home, jdir, plan)
    if plan is not None:
        _fill_from_plan(tracker, jdir, row, plan)
    tracker.finish_run(row.run_id, status, {})


class RunWork:
    """The MLflow work beside a running job, in one thread: import MLflow (so ending the run
    at exit takes milliseconds), complete a run made ahead from the plan, tag the attempt;
    ``ready`` is set then, and the spare runs are topped up after it."""

    def __init__(self, home: Path, row: JobRecord) -> None:
        self.home = home
        self.row = row
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._work, daemon=True)

    def start(self) -> RunWork:
        self._thread.start()
        return self

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _work(self) -> None:
        tracker = None
        time.sleep(START_DELAY_S)  # the command's own start first: it has the CPU to itself
        try:
            jdir = job_dir(self.home, self.row.job_id)
            tracker = _tracker(self.home, jdir, read_plan(jdir))
            if not complete_from_plan(self.home, self.row, tracker):
                tracker.set_attempt(self.row.run_id, self.row.attempts)
        except Exception:
            pass
        finally:
            self.ready.set()
        record_hardware(self.home, self.row, tracker)
        if tracker is not None:
            keep_spares(self.home, tracker)


def record_hardware(home: Path, row: JobRecord, tracker: Any) -> None:
    """What the job runs on, in its folder (JobInfo.hardware) and as ``air.hardware.*`` tags."""
    from air_skills.gpu.hardware import describe, mlflow_tags, write_record

    try:
        info = describe(row.gpu_list(), row.backend)
        write_record(job_dir(home, row.job_id), info)
        if tracker is not None and row.run_id:
            tracker.set_tags(row.run_id, mlflow_tags(info))
    except Exception:  # a record less: the job itself is not affected
        pass


def keep_spares(home: Path, tracker: Any) -> None:
    """Top up the spare runs of ``tracker``'s URI, from a store of this thread's own (the
    home's writer does it, when it holds MLflow)."""
    from air_skills.runtime.runs.spare_runs import top_up

    if hasattr(tracker, "top_up_spares"):
        try:
            tracker.top_up_spares()
        except Exception:
            pass
        return

    try:
        store = Store(home)
    except Exception:
        return
    try:
        top_up(store, tracker)
    finally:
        store.close()
