"""Launch preparation shared by every backend: the job's folder, its MLflow run, dedupe, discard."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills.errors import TrackingUnavailable
from air_skills.home import default_home, ensure_home, job_dir
from air_skills.runtime.job_code import DIFF_ARTIFACT, CodePlan, dirty_diff_of, materialize
from air_skills.runtime.store import Store, new_job_id


class LaunchContext:
    """What backends work over: the home folder, its store (one per thread), the tracker.

    Safe to share between threads; the tracker is made on first use (MLflow is slow to import).
    """

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = ensure_home(Path(home).expanduser() if home else default_home()).resolve()
        self._local = threading.local()
        self._tracker: Any = None

    @property
    def store(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.home)
        return store

    @property
    def tracker(self) -> Any:
        if self._tracker is None:
            from air_skills.tracking.mlflow import MlflowTracker

            self._tracker = MlflowTracker(self.home)
        return self._tracker

    def job_dir(self, job_id: str) -> Path:
        return job_dir(self.home, job_id)


@dataclass
class PreparedJob:
    """A job's folder and MLflow run, made before the job is recorded in the store."""

    job_id: str
    jdir: Path
    log_path: Path
    name: str
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_note: str | None = None
    code: dict[str, Any] | None = None  # the job's code info (a snapshot job), see job_code


def job_name(name: str | None, command: list[str]) -> str:
    """The job's name: the spec's, else the command's file name."""
    return name or Path(command[0]).name


def find_by_idempotency_key(store: Store, key: str | None) -> sqlite3.Row | None:
    """The job already launched with this idempotency key (None without a key)."""
    return store.by_idempotency_key(key) if key else None


def prepare_job(
    ctx: LaunchContext,
    *,
    name: str,
    config: dict[str, Any],
    data: Iterable[Any] = (),
    track: bool = True,
    experiment: str | None = None,
    tags: dict[str, str] | None = None,
    code: CodePlan | None = None,
) -> PreparedJob:
    """The job's folder (config, data links, code view) and its MLflow run, before it is
    recorded.

    Every backend launches through this: one place decides what a job's folder holds.
    ``data`` holds the spec's resolved data inputs (objects or dicts with name, path, digest).
    ``code`` is the checked snapshot (``job_code.plan_code``); its view is made here, so the
    command starts at once when the job is scheduled, and a failure leaves no job behind.
    """
    data = list(data)
    job_id = new_job_id()
    jdir = ctx.job_dir(job_id)
    jdir.mkdir(parents=True)
    job = PreparedJob(job_id, jdir, jdir / "output.log", name)
    try:
        (jdir / "config.json").write_text(json.dumps(config, indent=1))
        (jdir / "data").mkdir()
        if data:
            from air_skills.tracking.data import link_inputs

            link_inputs(data, jdir / "data")
        if code is not None:
            job.code = materialize(ctx.home, code, jdir)
    except BaseException:
        shutil.rmtree(jdir, ignore_errors=True)
        raise
    if track:
        run_tags = {**(tags or {}), **(code.tags() if code is not None else {})}
        try:
            job.run_id, job.experiment_id = ctx.tracker.create_run(
                job_id=job_id, name=name, experiment=experiment, config=config, tags=run_tags
            )
            if data:
                from air_skills.tracking.data import log_inputs

                log_inputs(ctx.tracker, job.run_id, data)
            diff = dirty_diff_of(code) if code is not None else ""
            if diff:
                ctx.tracker.log_text(job.run_id, diff, DIFF_ARTIFACT)
        except TrackingUnavailable as exc:
            job.tracking_note = f"tracking unavailable: {exc.message}"
    return job


def discard_prepared(ctx: LaunchContext, job: PreparedJob) -> None:
    """Remove a prepared job's folder and run: a concurrent caller with its key won."""
    shutil.rmtree(job.jdir, ignore_errors=True)
    if job.run_id:
        try:
            ctx.tracker.delete_run(job.run_id)
        except Exception:
            pass  # an orphan run is harmless; the launch itself succeeded
