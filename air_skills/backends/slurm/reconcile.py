"""Reconciling Slurm records with what Slurm says (squeue, scontrol) and what the job left.

    PENDING, REQUEUED, ...     -> QUEUED     (the reason Slurm gives, in the message)
    RUNNING, COMPLETING, ...   -> RUNNING
    COMPLETED                  -> SUCCEEDED
    FAILED, OUT_OF_MEMORY      -> FAILED (user; retried while max_retries allows), unless
                                  NCCL's signatures or a drained node say infra (failures.py)
    TIMEOUT, DEADLINE          -> TIMED_OUT
    CANCELLED                  -> CANCELLED  (by AIR, or by scancel outside it: said so)
    NODE_FAIL, BOOT_FAIL, ...  -> an infra failure: resubmitted (the node excluded where the
                                  cluster has others) while AIR_MAX_INFRA_RETRIES allows
    (forgotten: MinJobAge)     -> settled from the runner's ``slurm-exit.json``

A job whose submitter died after ``sbatch`` and before recording the id is found again by its
Slurm job name (``air-<job id>``). A job squeue and scontrol forgot is asked of ``sacct``
where the cluster keeps accounting; where it does not (``accounting_storage/none``) the
runner's ``slurm-exit.json`` settles it. An unreachable controller changes nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from air_skills.backends.settle import finish, finish_stopped
from air_skills.backends.slurm import commands, cordons, staging
from air_skills.backends.slurm.commands import ACTIVE, INFRA, WAITING, SlurmJob
from air_skills.backends.slurm.failures import hostnames, infra_cause
from air_skills.backends.slurm.runner import EXIT_FILE
from air_skills.backends.slurm.submit import job_name, ref_of, slurm_id_of, submit
from air_skills.errors import AirError
from air_skills.home import read_job_json
from air_skills.runtime.execution.gang import is_gang
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.results.outcomes import max_infra_retries
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus

SUBMIT_GRACE_S = 60.0  # a record with no Slurm id yet is left alone this long
RECONCILE_LOCK = "slurm-reconcile.lock"  # in AIR_HOME: one reconciling process at a time
DONE = "slurm.done"

if TYPE_CHECKING:
    from air_skills.models import JobSpec


def _stored_spec(row: JobRecord) -> JobSpec:
    """The job's spec as recorded (pydantic: imported only when a job needs settling)."""
    from air_skills.models import STORED, JobSpec

    return JobSpec.model_validate_json(row.spec, context=STORED)


def read_exit(jdir: Path) -> dict[str, Any] | None:
    """The runner's record of the command's end, if it wrote one (a regular file only)."""
    path = jdir / EXIT_FILE
    try:
        data = read_job_json(path, max_bytes=4096)  # never waits on a FIFO, never follows a link
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def reconcile(rt: LaunchContext) -> int:
    """Bring live Slurm records in line with Slurm. Returns how many changed.

    One process at a time per home (the others skip: the next look catches up): two that both
    saw an attempt end would otherwise both submit the next one, and the loser's copy, cancelled
    once the winner's id is recorded, may already have run (issue 37.15)."""
    rows = rt.store.rows("WHERE backend='slurm' AND status IN ('QUEUED','RUNNING') ORDER BY seq")
    if not rows:
        return 0
    fd = os.open(rt.home / RECONCILE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0
        return _reconcile(rt)
    finally:
        os.close(fd)


def _reconcile(rt: LaunchContext) -> int:
    rows = rt.store.rows("WHERE backend='slurm' AND status IN ('QUEUED','RUNNING') ORDER BY seq")
    ids = [i for r in rows if (i := slurm_id_of(r.backend_ref))]
    lost = frozenset(job_name(r.job_id) for r in rows if not r.backend_ref)
    seen = commands.queue(ids, lost)
    for sid in ids:  # squeue no longer lists it: scontrol, then sacct where there is one
        if sid not in seen and (job := commands.show(sid)) is not None:
            seen[sid] = job
    forgotten = [sid for sid in ids if sid not in seen]
    seen.update((commands.accounting(forgotten) or {}) if forgotten else {})
    changed = 0
    for row in rows:
        sid = slurm_id_of(row.backend_ref)
        if sid is None:
            changed += _adopt(rt, row, seen.get(job_name(row.job_id)))
            continue
        job = seen.get(sid)  # None: Slurm forgot it, without accounting: its files say
        try:
            changed += settle(rt, row, sid, job)
        except AirError as exc:  # one job's trouble never stops the others' reconcile
            rt.store.event(row.job_id, "slurm-reconcile", f"not settled: {exc.message}")
    return changed


def _adopt(rt: LaunchContext, row: JobRecord, job: SlurmJob | None) -> int:
    """A record without a Slurm id: adopt the job its dead submitter left, or give up on it."""
    if job is not None:
        if rt.store.set_backend_ref(row.job_id, ref_of(job.job_id), expected=None):
            rt.store.event(row.job_id, "slurm-adopted", f"found again as Slurm job {job.job_id}")
            return 1
        return 0
    if time.time() - row.created_at < SUBMIT_GRACE_S:
        return 0
    return finish(
        rt,
        row,
        JobStatus.FAILED,
        "FAILED (infra): the job was never submitted to Slurm (its launcher stopped first)."
        " Next: relaunch it",
        failure_kind="infra",
        done_marker=DONE,
    )


def settle(rt: LaunchContext, row: JobRecord, sid: str, job: SlurmJob | None) -> int:
    """Apply one Slurm job's state to its record."""
    jdir = Path(row.log_path).parent
    if (sdir := staging.stage_dir(rt.home, row.job_id)) is not None:
        staging.fetch(jdir, sdir)  # the log and exit record from the shared storage
    _relay(rt, row, jdir)
    if job is None:  # Slurm has forgotten it (MinJobAge): its files say how it ended
        ended = read_exit(jdir)
        if ended is None:
            return finish_stopped(
                rt,
                row,
                JobStatus.FAILED,
                f"FAILED (infra): Slurm no longer knows job {sid} and it left no exit record"
                f" (killed with its node?). Next: read `air logs {row.job_id}`, then relaunch",
                failure_kind="infra",
                done_marker=DONE,
            )
        return _from_exit(rt, row, ended)
    state = job.state.split()[0].rstrip("+")
    if state in WAITING:
        if row.status == "RUNNING":  # Slurm requeued it (preemption, a requeue by hand)
            rt.store.requeue(
                row.job_id, message=f"QUEUED: requeued by Slurm ({state})", kind="preempted"
            )
            return 1
        reason = job.reason if job.reason not in ("", "None") else "waiting for resources"
        rt.store.set_message(row.job_id, f"QUEUED on Slurm as job {sid}: {reason}")
        return 0
    if state in ACTIVE:
        if row.status == "RUNNING" and (over := _past_disk_cap(rt, row, sdir or jdir)):
            commands.scancel(sid)  # as a local supervisor stops it (supervision/disk_cap.py)
            return finish(
                rt,
                row,
                JobStatus.FAILED,
                f"FAILED: {over}; the job was stopped. Next: keep fewer or smaller checkpoints"
                " and outputs in its folder, or raise disk_gb, then relaunch",
                failure_kind="user",
                done_marker=DONE,
            )
        if row.status == "QUEUED":
            with rt.store.tx() as c:
                rt.store.mark_running(c, row.job_id, [], row.cpus or 1, False)
            rt.store.set_message(row.job_id, f"RUNNING on Slurm as job {sid} on {job.node}")
            return 1
        return 0
    spec = _stored_spec(row)
    ended = read_exit(jdir)
    if state == "COMPLETED":
        return finish(rt, row, JobStatus.SUCCEEDED, "SUCCEEDED", exit_code=0, done_marker=DONE)
    if state in ("TIMEOUT", "DEADLINE"):
        return finish(
            rt,
            row,
            JobStatus.TIMED_OUT,
            f"TIMED_OUT: ran past timeout_min={spec.timeout_min}; Slurm stopped it."
            " Next: raise timeout_min, or resume from AIR_CHECKPOINT_DIR",
            done_marker=DONE,
        )
    if state == "CANCELLED":
        if row.stop_request == "cancel" or ended is None:
            return finish_stopped(
                rt,
                row,
                JobStatus.CANCELLED,
                f"CANCELLED: Slurm job {sid} was cancelled outside AIR (scancel)",
                done_marker=DONE,
            )
        return _from_exit(rt, row, ended)
    if state in INFRA and ended is not None and ended.get("slurm_id") == sid:
        return _from_exit(rt, row, ended)  # the command ended before its node was lost
    if state in INFRA:
        return _infra_retry(
            rt, row, spec, f"Slurm reported {state} on node {job.node or '?'}", *hostnames(job.node)
        )
    # FAILED, OUT_OF_MEMORY, and anything else that ended: the command's own failure, unless
    # its log shows NCCL's signatures or its node was drained under it (failures.py).
    code = (ended or {}).get("exit_code", job.exit_code)
    cause = infra_cause(row.log_path, code, is_gang(spec.model_dump()), job.node)
    if cause is not None:
        return _infra_retry(rt, row, spec, cause.what, *cause.nodes)
    why = "out of memory" if state == "OUT_OF_MEMORY" else f"exit code {code}"
    return _user_failure(rt, row, spec, why, code)


def _past_disk_cap(rt: LaunchContext, row: JobRecord, folder: Path) -> str | None:
    """What to say of a running job past its disk cap (disk_gb, AIR_JOB_DISK_GB), checked on
    each reconcile: a Slurm job has no supervisor on this machine to poll it."""
    from air_skills.runtime.supervision.disk_cap import DiskWatch, cap_gb

    spec = json.loads(row.spec)
    cap = cap_gb(spec, None)
    return DiskWatch(folder, cap).tick(0.0) if cap else None


def _relay(rt: LaunchContext, row: JobRecord, jdir: Path) -> None:
    """A sandboxed job's metrics, params, tags and artifacts, forwarded from its own store to
    its run (metric_relay.py): on each reconcile, as a local job's supervisor does."""
    if not row.run_id:
        return
    from air_skills.runtime.execution.metric_relay import open_relay
    from air_skills.tracking.mlflow import tracking_uri

    relay = open_relay(jdir, row.run_id, row.experiment_id, tracking_uri(rt.home))
    if relay is not None:
        relay.stop()  # no thread: forwards what is new, notes how far


def _from_exit(rt: LaunchContext, row: JobRecord, ended: dict[str, Any]) -> int:
    code = ended.get("exit_code")
    if code == 0:
        return finish(rt, row, JobStatus.SUCCEEDED, "SUCCEEDED", exit_code=0, done_marker=DONE)
    if row.stop_request == "cancel":
        return finish(
            rt, row, JobStatus.CANCELLED, f"CANCELLED: {row.stop_reason}", done_marker=DONE
        )
    spec = _stored_spec(row)
    cause = infra_cause(row.log_path, code, is_gang(spec.model_dump()), "")
    if cause is not None:
        return _infra_retry(rt, row, spec, cause.what)
    why = f"killed by {ended['signal']}" if ended.get("signal") else f"exit code {code}"
    return _user_failure(rt, row, spec, why, code if isinstance(code, int) else None)


def _user_failure(
    rt: LaunchContext, row: JobRecord, spec: JobSpec, why: str, code: int | None
) -> int:
    if row.user_retries < spec.max_retries:
        return _resubmit(rt, row, spec, "user", f"QUEUED: retrying after {why}", code=code)
    return finish(
        rt,
        row,
        JobStatus.FAILED,
        f"FAILED: {why}. Next: read `air logs {row.job_id}`",
        exit_code=code,
        failure_kind="user",
        done_marker=DONE,
    )


def _infra_retry(rt: LaunchContext, row: JobRecord, spec: JobSpec, what: str, *nodes: str) -> int:
    """An infra failure: resubmitted while the budget allows, its node excluded when the
    cluster has another that could run it."""
    if row.infra_retries >= max_infra_retries():
        return finish(
            rt,
            row,
            JobStatus.FAILED,
            f"FAILED (infra): {what}; infra retries spent. Next: check the node (`sinfo -R`),"
            " then relaunch",
            failure_kind="infra",
            done_marker=DONE,
        )
    nodes = tuple(n for n in nodes if n)
    exclude = _bad_nodes(rt, row) + list(nodes)
    others = {n for n, _ in commands.nodes()} - set(exclude)
    for node in nodes:  # the cordon: excluded from this job's retries, noted in `air gpus`
        rt.store.event(row.job_id, cordons.EVENT, cordons.note(node, what))
    message = f"QUEUED: retrying after an infra failure ({what})"
    return _resubmit(rt, row, spec, "infra", message, exclude=exclude if others else None)


def _resubmit(
    rt: LaunchContext,
    row: JobRecord,
    spec: JobSpec,
    kind: str,
    message: str,
    *,
    code: int | None = None,
    exclude: list[str] | None = None,
) -> int:
    """Count the ended attempt's retry once (only one process wins) and submit the next.

    An attempt that ran and ended between two looks was never seen RUNNING: its record is
    still QUEUED. It is an attempt all the same (issue 37.15: it went uncounted, so a job that
    failed once and then succeeded showed no retry): marked run, then requeued, in one
    transaction that checks the record still names that attempt and has not counted it.
    """
    with rt.store.tx() as c:
        fresh = rt.store.row_in(c, row.job_id)
        if fresh is None or fresh.backend_ref != row.backend_ref:
            return 0  # another process moved on to the next attempt
        if fresh.status == "QUEUED" and not _counted(rt, fresh):
            rt.store.mark_running(c, row.job_id, [], fresh.cpus or 1, False)
            fresh = rt.store.row_in(c, row.job_id)
        if fresh is not None and fresh.status == "RUNNING":
            if not rt.store.requeue(row.job_id, message=message, kind=kind, exit_code=code, c=c):
                return 0
        elif fresh is None or fresh.status != "QUEUED":
            return 0
    submit(rt, _reread(rt, row), spec, exclude)
    return 1


def _counted(rt: LaunchContext, row: JobRecord) -> bool:
    """Whether the end of the record's current Slurm attempt was counted already (requeued
    after it was submitted: its next submission then failed, and is due again)."""
    sid = slurm_id_of(row.backend_ref)
    counted = False
    for e in rt.store.events(row.job_id):
        if e["kind"] in ("slurm-submitted", "slurm-adopted") and e["message"].endswith(f" {sid}"):
            counted = False
        elif e["kind"] in ("requeued-user", "requeued-infra"):  # not a preemption's
            counted = True
    return counted


def _bad_nodes(rt: LaunchContext, row: JobRecord) -> list[str]:
    events = rt.store.events(row.job_id)
    return [cordons.node_of(e["message"]) for e in events if e["kind"] == cordons.EVENT]


def _reread(rt: LaunchContext, row: JobRecord) -> JobRecord:
    fresh = rt.store.row(row.job_id)
    assert fresh is not None
    return fresh
