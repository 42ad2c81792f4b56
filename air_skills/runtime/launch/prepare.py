"""Launch preparation shared by every backend: the job's folder, its MLflow run, dedupe, discard.

The run itself is runtime/launch/launch_run.py's (made here, over REST, claimed from the spares, or
left to the supervisor).

A job's folder is built under a temporary name and renamed into place inside the transaction
that records the job (``recording``), so a launcher killed at any step leaves either a whole
job or a crashed launch that runtime/launch/orphans.py cleans up (see
runtime/launch/launch_intent.py).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from air_skills.errors import StoreError
from air_skills.job_folder import write_fresh
from air_skills.runtime.code.job_code import CodePlan, materialize
from air_skills.runtime.launch import launch_intent, launch_run
from air_skills.runtime.launch.context import LaunchContext, PreparedJob
from air_skills.runtime.process.faults import crash_point
from air_skills.runtime.store.idempotency import check_same_spec
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store, new_job_id


def job_name(name: str | None, command: list[str]) -> str:
    """The job's name: the spec's, else the command's file name."""
    return name or Path(command[0]).name


def launcher_tag(spec: Any) -> dict[str, str]:
    """The run's ``air.launched_by`` and ``mlflow.user`` (the MLflow UI's User column) tags:
    who launched the job (an identity or the local user). Applied after the spec's tags, so a
    spec cannot name another identity in either."""
    who = getattr(spec, "launched_by", None)
    return {"air.launched_by": who, "mlflow.user": who} if who else {}


def find_by_idempotency_key(
    store: Store, key: str | None, spec: Mapping[str, Any] | None = None
) -> JobRecord | None:
    """The job already launched with this idempotency key (None without a key).

    With ``spec`` (the new launch's, as JSON data: workdir resolved, defaults filled), a key
    reused for a different spec is an ``idempotency-conflict`` naming the job and the fields
    (runtime/store/idempotency.py; ``Store.queue`` applies the same check to a launch that raced).
    """
    row = store.by_idempotency_key(key) if key else None
    if row is None or spec is None or key is None:
        return row
    check_same_spec(key, row.job_id, row.name, row.spec_dict(), spec)
    return row


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
    run_later: bool = False,
    reserve_checked: bool = False,
    job_id: str | None = None,
) -> PreparedJob:
    """The job's folder (config, data links, code view) and its MLflow run, before it is
    recorded.

    Every backend launches through this: one place decides what a job's folder holds.
    ``data`` holds the spec's resolved data inputs (objects or dicts with name, path, digest).
    ``code`` is the checked snapshot (``job_code.plan_code``); its view is made here, so the
    command starts at once when the job is scheduled, and a failure leaves no job behind.
    The folder is built under a temporary name: record it with ``recording``.
    ``run_later``: the backend's supervisor can complete or make the run (local jobs): the
    launch then claims a spare run, or makes none here unless ``ctx.make_runs_here``.
    ``reserve_checked``: the caller ran ``check_reserve`` for its group (a batch: once).
    ``job_id``: one that a group's intent lists (launch_intent.write_group): no intent of the
    job's own is written.
    """
    data = list(data)
    if not reserve_checked:
        check_reserve(ctx.home)  # a job that filled the disk leaves air room for its own state
    grouped = job_id is not None
    job_id = job_id or new_job_id()
    final = ctx.job_dir(job_id)
    job = PreparedJob(job_id, launch_intent.build_dir(ctx.home, job_id), final, name)
    try:
        with disk_full_named(ctx.home / "jobs"):
            # The intent first: whatever exists of this job from here on, a sweep finds it.
            if not grouped:
                launch_intent.write(ctx.home, job_id)
            crash_point("prepare:intent")
            _build_folder(ctx, job, config, data, code)
        crash_point("prepare:folder")
        if track:
            make = launch_run.plan_run if run_later else launch_run.create_run_here
            make(ctx, job, config, data, experiment, tags, code)
            crash_point("prepare:run")
    except BaseException:
        discard_prepared(ctx, job)
        raise
    return job


def _build_folder(
    ctx: LaunchContext,
    job: PreparedJob,
    config: dict[str, Any],
    data: list[Any],
    code: CodePlan | None,
) -> None:
    job.jdir.mkdir()
    write_fresh(job.jdir, "config.json", json.dumps(config, indent=1))
    (job.jdir / "data").mkdir()
    if data:
        from air_skills.tracking.data import link_inputs

        link_inputs(data, job.jdir / "data")
    if code is not None:
        job.code = materialize(ctx.home, code, job.jdir, final_dir=job.final_dir)


@contextmanager
def recording(ctx: LaunchContext, job: PreparedJob) -> Iterator[sqlite3.Connection]:
    """The transaction that records a prepared job (``store.queue(..., c=c, jdir=job.jdir)``).

    Just before its COMMIT, while this process holds the write lock, the folder is renamed
    into place if the job was recorded: no pass can start the job, and no reader can see
    its record, before its folder is there. A launcher killed before the rename leaves a
    temporary folder; killed after it, a folder without a record; both are orphans that a
    sweep removes (the intent names them). A job not recorded (a concurrent caller with its
    idempotency key won) or any failure discards the prepared job.
    """
    with recording_many(ctx, [job]) as c:
        yield c


@contextmanager
def recording_many(ctx: LaunchContext, jobs: list[PreparedJob]) -> Iterator[sqlite3.Connection]:
    """``recording`` of several prepared jobs in one transaction (a batch's items): each one
    recorded has its folder renamed into place before the COMMIT; a failure discards them
    all (none is queued), a job not recorded is discarded alone."""
    store = ctx.store
    try:
        with disk_full_named(ctx.home / "jobs"), store.tx() as c:
            crash_point("launch:locked")
            yield c
            for job in jobs:
                if store.row_in(c, job.job_id) is not None:
                    os.rename(job.jdir, job.final_dir)
                    job.jdir = job.final_dir
                    crash_point("launch:placed")
    except BaseException:
        for job in jobs:
            discard_prepared(ctx, job)
        raise
    placed = [job for job in jobs if job.jdir == job.final_dir]
    for job in jobs:
        if job.jdir != job.final_dir:
            discard_prepared(ctx, job)
    if not placed:
        return
    crash_point("launch:committed")
    for job in placed:
        launch_intent.remove(ctx.home, job.job_id)


def discard_prepared(ctx: LaunchContext, job: PreparedJob) -> None:
    """Remove a prepared job's folder and run (a failed launch, or a concurrent caller with
    its idempotency key won), then its intent: a crash midway is left for the sweep."""
    shutil.rmtree(job.jdir, ignore_errors=True)
    if job.run_id and not job.claimed:  # a claimed spare went back with the rollback
        try:
            ctx.tracker.delete_run(job.run_id)
        except Exception:
            pass  # tracking down: the run stays, and no job points at it
    launch_intent.remove(ctx.home, job.job_id)


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def check_reserve(home: Path) -> None:
    """Refuse a launch (``disk-full``) when the disk holding AIR_HOME has less free than
    AIR_DISK_RESERVE_MB: what is left is air's, for its store and the running jobs' records.
    The refusal says what ``air gc`` would free."""
    from air_skills import settings

    reserve_mb = float(settings.get("AIR_DISK_RESERVE_MB"))
    try:
        free = shutil.disk_usage(home).free
    except OSError:
        return
    if free >= reserve_mb * 1e6:
        return
    try:
        freed = _reclaimable(home)
    except Exception:  # the estimate is a courtesy: the refusal stands without it
        freed = "`air gc --dry-run` says what it would free"
    raise StoreError(
        f"the disk holding {home} has {free / 1e6:.0f} MB free, under the {reserve_mb:g} MB air"
        " keeps for its own state (AIR_DISK_RESERVE_MB); nothing was launched",
        code="disk-full",
        hint=f"free space: {freed}; remove old job folders or outputs (`df -h`, `du -sh"
        f" {home}/jobs/*`), or cap jobs with disk_gb / AIR_JOB_DISK_GB, then retry",
        path=os.fspath(home),
        free_mb=round(free / 1e6),
    )


def _reclaimable(home: Path) -> str:
    """What ``air gc`` would free: code snapshots, and finished jobs by the retention policy
    (AIR_GC_KEEP_DAYS / AIR_GC_KEEP_JOBS; unset, by AIR_SNAPSHOT_RETENTION_DAYS's age, with
    the command that would do it)."""
    from air_skills import settings
    from air_skills.runtime.code.code_gc import collect
    from air_skills.runtime.runs.retention import collect as collect_jobs
    from air_skills.runtime.runs.retention import policy

    code = collect(home, dry_run=True)["bytes_freed"]
    days, count = policy()
    if days is not None or count is not None:
        jobs = collect_jobs(home, days, count, dry_run=True)
        return (
            f"`air gc` would free {(code + jobs['bytes_freed']) / 1e6:.1f} MB ("
            f"{jobs['jobs_removed']} finished jobs by AIR_GC_KEEP_DAYS/AIR_GC_KEEP_JOBS, their"
            " MLflow runs too)"
        )
    days = float(settings.get("AIR_SNAPSHOT_RETENTION_DAYS"))
    jobs = collect_jobs(home, days, None, dry_run=True)
    return (
        f"`air gc` would free {code / 1e6:.1f} MB, `air gc --older-than {days:g}`"
        f" {jobs['bytes_freed'] / 1e6:.1f} MB more ({jobs['jobs_removed']} finished jobs)"
    )


@contextmanager
def disk_full_named(where: Path) -> Iterator[None]:
    """A full disk (or quota) while writing a job's folder is a ``disk-full`` error naming
    the path (the file, else ``where``: a failed write names no file), not a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise
        path = os.fsdecode(exc.filename) if exc.filename else os.fspath(where)
        what = "the disk quota is exceeded" if exc.errno == errno.EDQUOT else "the disk is full"
        raise StoreError(
            f"{what} writing {path}; nothing was launched",
            code="disk-full",
            hint=f"free space on the disk holding {where} (`df -h` shows it), or set"
            " AIR_HOME to a folder on another disk, then retry",
            path=path,
        ) from exc
