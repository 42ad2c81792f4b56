"""Crashed launches cleaned up: the folders, MLflow runs and environment files they left.

A launcher killed mid-launch (kill -9, OOM, a closed terminal) leaves its intent in
``jobs/.launching`` (runtime/launch/launch_intent.py). A sweep reads only that small folder, at
most once a minute per process (``Client.reconcile`` calls it on every call), and for each
intent whose launcher is dead: without a record, it removes the job's folder (temporary or
renamed just before a COMMIT that never came) and ends its MLflow run as KILLED; with one
(the launch committed), it removes the intent, and the environment files of a job that has
ended. ``thorough`` (``air doctor``) also removes the environment files of every ended job.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

from air_skills.home import JOB_ENV, JOB_ID_RE, LAUNCH_ENV, job_dir
from air_skills.runtime.launch import launch_intent
from air_skills.runtime.launch.context import LaunchContext
from air_skills.runtime.store.store import TERMINAL

SWEEP_EVERY_S = 60.0  # per process and home: a sweep costs one listdir when nothing crashed
MAX_PER_SWEEP = 200  # intents looked at per sweep: the rest wait for the next one
MAX_RUN_TRIES = 3  # sweeps that try to end a crashed launch's run before giving up on it
PART_AGE_S = 60.0  # a half-written intent older than this was left by a crash

_last: dict[Path, float] = {}
_lock = threading.Lock()


def sweep_orphans(ctx: LaunchContext, *, force: bool = False, thorough: bool = False) -> int:
    """Clean up after crashed launches; returns how many were cleaned up.

    Skipped when this process swept this home less than SWEEP_EVERY_S ago, unless ``force``.
    """
    now = time.monotonic()
    with _lock:
        last = _last.get(ctx.home)
        if not force and last is not None and now - last < SWEEP_EVERY_S:
            return 0
        _last[ctx.home] = now
    for part in launch_intent.stale_parts(ctx.home, PART_AGE_S):
        part.unlink(missing_ok=True)
    cleaned = 0
    for job_id in launch_intent.pending(ctx.home)[:MAX_PER_SWEEP]:
        intent = launch_intent.read(ctx.home, job_id)
        if intent is None or launch_intent.launcher_alive(intent):
            continue  # gone meanwhile, or a launch in progress
        group = intent.get("group")
        if isinstance(group, list):  # a batch's group (launch_intent.write_group)
            cleaned += _clean_group(ctx, job_id, group)
            continue
        cleaned += _clean(ctx, job_id, intent)
    if thorough:
        _drop_ended_envs(ctx)
    return cleaned


def _clean(ctx: LaunchContext, job_id: str, intent: dict[str, Any]) -> int:
    """Undo what a dead launcher left of ``job_id``; its intent goes last (a crash of the
    sweep itself leaves it for the next one)."""
    row = ctx.store.row(job_id)
    if row is not None:  # committed: the job is whole (its folder was renamed before COMMIT)
        shutil.rmtree(launch_intent.build_dir(ctx.home, job_id), ignore_errors=True)
        if row.status in TERMINAL:
            _drop_envs(job_dir(ctx.home, job_id))
        launch_intent.remove(ctx.home, job_id)
        return 0
    # No record, and none can come: its launcher is dead. Both names may exist (never both
    # at once): the temporary folder, or the folder renamed just before the missing COMMIT.
    shutil.rmtree(launch_intent.build_dir(ctx.home, job_id), ignore_errors=True)
    shutil.rmtree(job_dir(ctx.home, job_id), ignore_errors=True)
    has_run = intent.get("run_id") or intent.get("run") == "creating"
    if has_run and not _end_runs(ctx, job_id, intent.get("run_id")):
        tries = int(intent.get("tries") or 0) + 1
        if tries < MAX_RUN_TRIES:  # tracking down now: keep the intent, try again later
            launch_intent.rewrite(ctx.home, job_id, {**intent, "tries": tries})
            return 1
    launch_intent.remove(ctx.home, job_id)
    return 1


def _clean_group(ctx: LaunchContext, name: str, members: list[Any]) -> int:
    """Undo what a dead launcher left of a batch's group: each member as a launch of its own
    whose intent names no run (a group's runs are spares claimed in its transaction, rolled
    back with it; a run made at launch has an intent of its own); the group's intent last."""
    cleaned = 0
    for job_id in members:
        if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
            continue
        left = (
            launch_intent.build_dir(ctx.home, job_id).exists() or job_dir(ctx.home, job_id).exists()
        )
        done = _clean(ctx, job_id, {})  # 1 when it had no record
        cleaned += done if left else 0  # a member never built is not counted
    launch_intent.remove(ctx.home, name)
    return cleaned


def _end_runs(ctx: LaunchContext, job_id: str, run_id: str | None) -> bool:
    """End the crashed launch's MLflow run as KILLED (found by its job id tag when the
    launcher died before noting its id). False when tracking cannot be reached."""
    try:
        tracker = ctx.tracker
        runs = [run_id] if run_id else _runs_tagged(tracker.client, job_id)
        for run in runs:
            _end_run(tracker, run)
    except Exception:  # tracking down or broken: the intent is kept for a later sweep
        return False
    return True


def _runs_tagged(client: Any, job_id: str) -> list[str]:
    """The runs tagged ``air.job_id = job_id`` (a job id is checked: safe in the filter)."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    runs = client.search_runs(experiments, f"tags.`air.job_id` = '{job_id}'", max_results=10)
    return [r.info.run_id for r in runs]


def _end_run(tracker: Any, run_id: str) -> None:
    """KILLED, unless it ended already or was deleted (a discard that got that far)."""
    info = tracker.client.get_run(run_id).info
    if info.lifecycle_stage == "deleted" or info.status not in ("RUNNING", "SCHEDULED"):
        return
    tracker.finish_run(run_id, "CANCELLED")  # CANCELLED is MLflow's KILLED


def _drop_envs(jdir: Path) -> None:
    """The job's environment files (they may hold secrets; an ended job needs them no more)."""
    for name in (LAUNCH_ENV, JOB_ENV):
        (jdir / name).unlink(missing_ok=True)


def _drop_ended_envs(ctx: LaunchContext) -> None:
    """Every ended job's environment files (a job ended by an older version kept them)."""
    marks = ",".join("?" * len(TERMINAL))
    for row in ctx.store.read(f"SELECT job_id FROM jobs WHERE status IN ({marks})", TERMINAL):
        try:
            _drop_envs(job_dir(ctx.home, row["job_id"]))
        except OSError:
            pass  # a folder that cannot be written: left as it is
