"""Reconciling Ray records with Ray's ``list_jobs``: status mapping, retries, settling."""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from air_skills.backends.ray import gangs, stall_watch
from air_skills.backends.ray.cluster import ClusterView, cluster_view
from air_skills.backends.ray.logs import PREVIOUS, sync_logs
from air_skills.backends.ray.packaging import upload
from air_skills.backends.ray.refs import job_lock, reread, split_ref, submission_id
from air_skills.backends.ray.sdk import call, connect, env_address, short
from air_skills.backends.ray.settle import finish, finish_stopped, settle_gone
from air_skills.backends.ray.submit import queued_message, submit
from air_skills.errors import AirError
from air_skills.job_folder import JobFolder
from air_skills.models import STORED, JobSpec
from air_skills.runtime.code.code_source import ray_working_dir_of
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.results.outcomes import (
    AttemptEnd,
    InfraFailure,
    Outcome,
    classify,
)
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.supervision import stall_end, stall_words
from air_skills.status import JobStatus

# A record whose submission is not visible on Ray yet is left alone this long.
SUBMIT_GRACE_S = 60.0
_UNREACHABLE_NOTE = re.compile(r" \[Ray (unreachable|cluster) .*\]$", re.S)  # our note, last
APPEND_SAFE = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC  # job-folder files: never wait on one


def without_note(message: str) -> str:
    return _UNREACHABLE_NOTE.sub("", message)


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def reconcile(rt: LaunchContext) -> int:
    """Bring live Ray records in line with Ray's ``list_jobs``. Returns how many changed.

    Never raises for an unreachable cluster: the records keep their last known status,
    with a note in their message.
    """
    rows = rt.store.rows("WHERE backend='ray' AND status IN ('QUEUED','RUNNING') ORDER BY seq")
    groups: dict[str, list[JobRecord]] = {}
    now = time.time()
    changed = 0
    for row in rows:
        sid, address = split_ref(row.backend_ref)
        if address is None:
            if now - row.queued_at > SUBMIT_GRACE_S:
                changed += settle_gone(rt, row, "the process submitting it stopped first")
            continue
        groups.setdefault(address, []).append(row)
    env_ray = env_address()
    for address, group in groups.items():
        try:
            ray = connect(env_ray or address)
            actual = ray.get_address()
            if actual.rstrip("/") != address.rstrip("/"):
                _note(
                    rt,
                    group,
                    f"[Ray cluster {address} not followed: RAY_ADDRESS points at {actual};"
                    " point it back to follow this job]",
                )
                continue
            jobs = {j.submission_id: j for j in call(ray, "list_jobs")}
        except Exception as exc:  # unreachable, refused, not installed: the record waits
            why = exc.message if isinstance(exc, AirError) else short(exc)
            stamp = time.strftime("%H:%M:%S", time.gmtime())
            _note(
                rt, group, f"[Ray unreachable at {stamp} UTC ({why}); status as last seen, retry]"
            )
            continue
        cluster: ClusterView | None = None
        for row in group:
            sid, _ = split_ref(row.backend_ref)
            job = jobs.get(sid)
            if job is not None and str(job.status) == "PENDING" and cluster is None:
                with contextlib.suppress(AirError):
                    cluster = cluster_view(ray)
            changed += _apply(rt, ray, row, job, cluster)
    return changed


def _note(rt: LaunchContext, rows: list[JobRecord], note: str) -> None:
    for row in rows:
        message = f"{without_note(row.message)} {note}"
        if message != row.message:
            rt.store.set_message(row.job_id, message)


def _apply(
    rt: LaunchContext, ray: Any, row: JobRecord, job: Any, cluster: ClusterView | None = None
) -> int:
    """Map one Ray job's state onto its record (under the job's lock)."""
    job_id = row.job_id
    with job_lock(rt.job_dir(job_id), block=False) as locked:
        if not locked:
            return 0  # another process is submitting, stopping or settling it
        row = reread(rt.store, job_id)
        if JobStatus(row.status).is_terminal():
            return 0
        sid, _ = split_ref(row.backend_ref)
        if job is None:
            return _settle_missing(rt, ray, row, sid)
        status = str(job.status)
        spec = JobSpec.model_validate_json(row.spec, context=STORED)
        if status == "PENDING":
            message = queued_message(spec, sid or "?", cluster)
            if row.status == "QUEUED" and row.message != message:
                rt.store.set_message(job_id, message)
            return 0
        if status == "RUNNING":
            changed = 0
            if row.status == "QUEUED":
                with rt.store.tx() as c:
                    rt.store.mark_running(c, job_id, [], spec.cpus or 1, False)
                row = reread(rt.store, job_id)
                changed = 1
            message = (
                f"RUNNING on Ray as {sid}"
                + (f" with {spec.gpus} GPU(s)" if spec.gpus else "")
                + (f" on node {job.driver_node_id[:12]}" if job.driver_node_id else "")
            )
            if row.stop_request or (
                row.message.startswith("RUNNING") and stall_words.MARK in row.message
            ):
                message = without_note(row.message)
            if row.message != message:
                rt.store.set_message(job_id, message)
            _check_timeout(rt, ray, row, spec, sid)
            found = stall_watch.look(rt, ray, reread(rt.store, job_id), spec.model_dump())
            if found is not None:
                return _stalled(rt, ray, reread(rt.store, job_id), spec, sid, found)
            return changed
        sync_logs(row, ray=ray, final=True)
        return settle_terminal(rt, ray, row, spec, job)


def _check_timeout(
    rt: LaunchContext, ray: Any, row: JobRecord, spec: JobSpec, sid: str | None
) -> None:
    if not spec.timeout_min or not row.started_at or row.stop_request:
        return
    if time.time() - row.started_at < spec.timeout_min * 60:
        return
    with rt.store.tx() as c:
        rt.store.request_stop(c, row.job_id, "timeout", f"ran past timeout_min={spec.timeout_min}")
    rt.store.set_message(
        row.job_id, f"RUNNING on Ray as {sid}: stopping, past timeout_min={spec.timeout_min}"
    )
    with contextlib.suppress(Exception):
        ray.stop_job(sid)


def _stalled(
    rt: LaunchContext, ray: Any, row: JobRecord, spec: JobSpec, sid: str | None, found: Any
) -> int:
    """Stop the stalled attempt on Ray, then its outcome (by ``on_stall``): failed or retried."""
    with contextlib.suppress(Exception):
        ray.stop_job(sid)
    with contextlib.suppress(Exception):
        sync_logs(row, ray=ray, final=True)
    return _record(rt, ray, row, spec, stall_end.outcome(found, row, spec.model_dump()))


def settle_terminal(rt: LaunchContext, ray: Any, row: JobRecord, spec: JobSpec, job: Any) -> int:
    job_id = row.job_id
    status = str(job.status)
    error_type = str(getattr(job.error_type, "value", job.error_type) or "")
    exit_code = getattr(job, "driver_exit_code", None)
    ray_says = first_line(job.message)
    sid = job.submission_id
    if status == "SUCCEEDED":
        return finish(
            rt, row, JobStatus.SUCCEEDED, f"SUCCEEDED: exited 0 (Ray job {sid})", exit_code=0
        )
    if status == "STOPPED":
        if row.stop_request == "timeout":
            return finish(
                rt,
                row,
                JobStatus.TIMED_OUT,
                f"TIMED_OUT: ran past timeout_min={spec.timeout_min} and was stopped on Ray."
                " Next: raise timeout_min or save checkpoints to AIR_CHECKPOINT_DIR and"
                " relaunch",
                failure_kind="user",
            )
        return finish_stopped(
            rt,
            row,
            JobStatus.CANCELLED,
            f"CANCELLED: the Ray job {sid} was stopped outside AIR (`ray job stop` or the"
            f" dashboard); Ray: {ray_says or 'stopped'}",
        )
    # FAILED: the shared exit -> retry policy (runtime/results/outcomes.py) decides what follows.
    if exit_code is None and error_type in ("", "JOB_ENTRYPOINT_COMMAND_ERROR"):
        m = re.search(r"exit code (-?\d+)", job.message or "")
        exit_code = int(m.group(1)) if m else None
    seen = gangs.log_infra(row.log_path, spec.nodes) if exit_code not in (None, 0) else None
    if error_type in ("", "JOB_ENTRYPOINT_COMMAND_ERROR") and seen is not None:
        # A dead node or a collective's failure (NCCL), said in the log: not the user's code.
        infra, placeable = seen
        view = None
        if spec.nodes > 1:
            with contextlib.suppress(AirError):
                view = cluster_view(ray)
        if view is not None and view.known:
            try:
                gangs.check_fit(spec, view)
            except AirError as exc:  # the cluster lost the nodes: a retry would wait forever
                placeable = False
                infra = replace(infra, what=f"{infra.what}; now {exc.message}")
        end = AttemptEnd(
            job_id,
            exit_code=exit_code,
            infra=infra,
            infra_retries=row.infra_retries,
            max_infra_retries=None if placeable else 0,
        )
        return _record(rt, ray, row, spec, classify(end))
    if error_type in ("", "JOB_ENTRYPOINT_COMMAND_ERROR") and exit_code is not None:
        failed = gangs.rank_failure(row.log_path, exit_code, spec)  # a gang: which rank
        end = AttemptEnd(
            job_id,
            exit_code=failed.exit_code if failed.rank is not None else exit_code,
            user_retries=row.user_retries,
            max_retries=spec.max_retries,
            runner=f"Ray job {sid}",
            rank=failed.rank,
            rank_error=failed.error_line,
        )
        outcome = classify(end)
        if exit_code == 127:  # on Ray, the likeliest cause: the program is not on the node
            how = f"exited with code {exit_code}"
            note = f" (command not found on the Ray node: {spec.command[0]!r}?)"
            outcome = replace(outcome, message=outcome.message.replace(how, how + note, 1))
        return _record(rt, ray, row, spec, outcome)
    label = error_type or "FAILED"
    if error_type == "JOB_SUPERVISOR_ACTOR_START_TIMEOUT":
        # Ray gives up on a job that waited 15 minutes for resources; it fits the
        # cluster (checked at submit), so it goes back in line as a new submission.
        view = None
        with contextlib.suppress(AirError):
            view = cluster_view(ray)
        fits = view is None or not view.known or spec.gpus <= view.largest_node("GPU")
        if fits:
            return _resubmit(
                rt,
                ray,
                row,
                spec,
                "pending",
                "QUEUED: Ray gave up waiting for resources after its start timeout;"
                " resubmitted, still waiting",
            )
    # Only a dead or unstartable job supervisor is worth another attempt.
    retryable = error_type in (
        "JOB_SUPERVISOR_ACTOR_DIED",
        "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE",
        "JOB_SUPERVISOR_ACTOR_START_FAILURE",
    )
    end = AttemptEnd(
        job_id,
        exit_code=exit_code,
        infra=InfraFailure(f"{label}: {ray_says}", source="ray"),
        infra_retries=row.infra_retries,
        max_infra_retries=None if retryable else 0,
    )
    return _record(rt, ray, row, spec, classify(end))


def _record(rt: LaunchContext, ray: Any, row: JobRecord, spec: JobSpec, outcome: Outcome) -> int:
    """Act on the policy's outcome: resubmit the job, or finish its record."""
    if outcome.action == "requeue":
        return _resubmit(rt, ray, row, spec, outcome.kind or "infra", outcome.message)
    assert outcome.status is not None
    return finish(
        rt,
        row,
        outcome.status,
        outcome.message,
        exit_code=outcome.exit_code,
        failure_kind=outcome.failure_kind,
    )


def _resubmit(
    rt: LaunchContext, ray: Any, row: JobRecord, spec: JobSpec, kind: str, message: str
) -> int:
    """Another attempt with the same id, run and checkpoint folder: a new Ray job."""
    job_id = row.job_id
    old_ref = row.backend_ref
    try:
        # A snapshot job's attempts all upload its snapshot, not the tree as it is now.
        workdir = ray_working_dir_of(rt.home, job_id, row.code) or spec.workdir
    except AirError as exc:  # the snapshot is gone (`air gc`): no attempt can run it again
        return finish(
            rt,
            row,
            JobStatus.FAILED,
            f"FAILED (infra): the next attempt cannot be submitted: {exc.message} (it was to"
            f" run again: {message.removeprefix('QUEUED: ')}). Next: {exc.hint}",
            failure_kind="infra",
        )
    with rt.store.tx() as c:
        if row.status == "QUEUED" and kind != "pending":
            rt.store.mark_running(c, job_id, [], spec.cpus or 1, False)
        if kind != "pending":
            rt.store.requeue(job_id, kind=kind, message=message, c=c)
    row = reread(rt.store, job_id)
    # Ray never takes a submission id twice: count on from the last one.
    m = re.search(r"-a(\d+)$", split_ref(old_ref)[0] or "")
    n = int(m.group(1)) + 1 if m else 2
    sid = submission_id(job_id, spec.idempotency_key, n)
    if not rt.store.set_backend_ref(
        job_id, f"{sid}@{ray.get_address()}", expected=old_ref, message=message
    ):
        return 0
    # Keep the finished attempt's output: the log goes on from it, Ray's next log after.
    log = Path(row.log_path)
    with contextlib.suppress(OSError), job_lock(log.parent, name="log.lock"):
        # Non-blocking, no link followed: a FIFO in the log's place is refused, not waited on.
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | APPEND_SAFE, 0o644)
        with os.fdopen(fd, "ab") as f:
            f.write(f"\n[air] attempt {row.attempts + 1} on Ray as {sid}\n".encode())
        with JobFolder.open(log.parent) as folder:  # a link at ray-previous.log: replaced
            with os.fdopen(folder.open_read(log.name), "rb") as src:
                folder.write(PREVIOUS, src)  # copied in chunks, not read whole
    cluster = None
    with contextlib.suppress(AirError):
        cluster = cluster_view(ray)
    try:
        runtime_env: dict[str, Any] = {}
        if not spec.image:  # an image holds its code (Ray: no working_dir beside image_uri)
            runtime_env = {"working_dir": workdir}
            upload(ray, ray.get_address(), runtime_env)
        submit(rt, ray, row, spec, sid, cluster, runtime_env)
    except AirError:
        pass  # the record stays QUEUED with the new reference; the next reconcile settles
    return 1


def _settle_missing(rt: LaunchContext, ray: Any, row: JobRecord, sid: str | None) -> int:
    """Settle a record whose Ray job is not on the cluster (we hold the job's lock)."""
    events = rt.store.events(row.job_id)
    submitted = max((e["ts"] for e in events if e["kind"] == "submitted"), default=row.queued_at)
    accepted = any(e["kind"] == "ray-accepted" and e["ts"] >= submitted for e in events)
    if not accepted and time.time() - submitted < SUBMIT_GRACE_S:
        return 0  # an unconfirmed submission may still be on its way to Ray
    if accepted:
        what = (
            f"the Ray job {sid} no longer exists on the cluster at {ray.get_address()}"
            " (deleted with `ray job delete`, or the cluster was restarted)"
        )
    else:
        what = f"the Ray job {sid} never reached the cluster at {ray.get_address()}"
    return settle_gone(rt, row, what)
