"""A launch's MLflow run: made in the launching process, made over REST, claimed from the
spare runs in the queue transaction, or left to the job's supervisor (runtime/runs/job_run.py)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from air_skills.errors import TrackingUnavailable
from air_skills.runtime.code.job_code import DIFF_ARTIFACT, CodePlan, dirty_diff_of
from air_skills.runtime.launch import launch_intent
from air_skills.runtime.process.faults import crash_point
from air_skills.runtime.runs import spare_runs
from air_skills.runtime.runs.job_run import PENDING_NOTE, write_plan
from air_skills.tracking import rest
from air_skills.tracking.mlflow import tracking_uri

if TYPE_CHECKING:
    from air_skills.runtime.launch.context import LaunchContext, PreparedJob


def _run_tags(tags: dict[str, str] | None, code: CodePlan | None) -> dict[str, str]:
    """The tags of a job's MLflow run, however it is made: the caller's, then its code's."""
    return {**(tags or {}), **(code.tags() if code is not None else {})}


def create_run_here(
    ctx: LaunchContext,
    job: PreparedJob,
    config: dict[str, Any],
    data: list[Any],
    experiment: str | None,
    tags: dict[str, str] | None,
    code: CodePlan | None,
) -> None:
    """The job's MLflow run (its id noted in the intent); tracking down is a note, not an error."""
    run_tags = _run_tags(tags, code)
    # Killed while the run is made, the launcher leaves a run the sweep finds by its tag.
    launch_intent.write(ctx.home, job.job_id, run="creating")
    try:
        job.run_id, job.experiment_id = ctx.tracker.create_run(
            job_id=job.job_id, name=job.name, experiment=experiment, config=config, tags=run_tags
        )
        crash_point("prepare:run-made")
        launch_intent.write(ctx.home, job.job_id, run_id=job.run_id)
        if data:
            from air_skills.tracking.data import log_inputs

            log_inputs(ctx.tracker, job.run_id, data)
        diff = dirty_diff_of(code) if code is not None else ""
        if diff:
            ctx.tracker.log_text(job.run_id, diff, DIFF_ARTIFACT)
    except TrackingUnavailable as exc:
        job.tracking_note = f"tracking unavailable: {exc.message}"


def plan_run(
    ctx: LaunchContext,
    job: PreparedJob,
    config: dict[str, Any],
    data: list[Any],
    experiment: str | None,
    tags: dict[str, str] | None,
    code: CodePlan | None,
) -> None:
    """Leave the run to the supervisor (its plan in the folder), with a spare to claim, a
    run made over REST, or none yet; or make it here as before (``make_runs_here``)."""
    uri = tracking_uri(ctx.home)
    job.pool = (uri, experiment)
    job.spares = spare_runs.candidates(ctx.store, uri, experiment)
    if not job.spares and ctx.make_runs_here:
        create_run_here(ctx, job, config, data, experiment, tags, code)
        return
    run_tags = _run_tags(tags, code)
    plan = {"uri": uri, "experiment": experiment, "name": job.name, "tags": run_tags}
    if code is not None:
        plan["diff"] = dirty_diff_of(code)
    if not job.spares and rest.is_http(uri):
        launch_intent.write(ctx.home, job.job_id, run="creating")
        try:
            job.run_id, job.experiment_id = rest.create_run(
                uri,
                spare_runs.experiment_name(experiment),
                name=job.name,
                tags={"air.job_id": job.job_id, "air.attempt": "1"},
            )
        except TrackingUnavailable as exc:  # as before: the run is made at the job's end
            job.tracking_note = f"tracking unavailable: {exc.message}"
            return
        launch_intent.write(ctx.home, job.job_id, run_id=job.run_id)
    write_plan(job.jdir, plan)
    job.run_uri, job.run_experiment = uri, experiment


def claim_run(ctx: LaunchContext, c: sqlite3.Connection, job: PreparedJob) -> None:
    """In the queue transaction: claim one of the job's spare runs, or note that its run is
    the supervisor's to make; and ask for this pool's spares to be kept (also when this
    process made the job's run: the pool is empty, and the next launch finds a spare)."""
    if job.run_uri is not None and job.run_id is None:
        claimed = spare_runs.claim(ctx.store, c, job.spares)
        if claimed is not None:
            job.run_id, job.experiment_id = claimed
            job.claimed = True
        else:
            job.tracking_note = PENDING_NOTE
    if ctx.wants_spares and job.pool is not None:
        spare_runs.want(ctx.store, c, *job.pool)


def give_back_run(ctx: LaunchContext, c: sqlite3.Connection, job: PreparedJob) -> None:
    """In the queue transaction of a job that was not recorded: its claimed spare goes back."""
    if job.claimed and job.run_id and job.run_uri:
        assert job.experiment_id is not None
        run = (job.run_id, job.experiment_id)
        spare_runs.give_back(ctx.store, c, run, job.run_uri, job.run_experiment)
        job.run_id = job.experiment_id = None
        job.claimed = False
