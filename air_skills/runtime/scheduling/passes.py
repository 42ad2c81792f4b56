"""The local backend: daemonless. Scheduling passes run in whichever process changed state.

A pass is one transaction: read the queue, the running jobs and the GPU pool, call the pure
scheduler, record its decisions. Supervisors are started (double fork, own session) after the
commit, each with its command already started when the quick preflight allows (the job does
not wait for an interpreter to boot); preemptions and cancels poke supervisors with
POKE_SIGNAL. A supervisor whose job ends runs the pass in the same transaction as the job's
end, and runs one of the jobs it starts itself (no new interpreter per job); with none to
run, it waits a while as an idle supervisor, and a pass hands it the next job it starts.
"""

from __future__ import annotations

import functools
import json
import os
import select
import sqlite3
import time
from dataclasses import dataclass, field

from air_skills import settings
from air_skills.gpu.providers import provider
from air_skills.home import job_dir
from air_skills.runtime.containers import container
from air_skills.runtime.process import proc
from air_skills.runtime.process.signals import POKE_SIGNAL
from air_skills.runtime.results.outcomes import (
    AttemptEnd,
    InfraFailure,
    classify,
    start_failed,
)
from air_skills.runtime.runs import job_run
from air_skills.runtime.runs.run_end import record_without_supervisor
from air_skills.runtime.scheduling import pass_queries as q
from air_skills.runtime.scheduling.scheduler import Inventory, QueuedJob, RunningJob, schedule
from air_skills.runtime.scheduling.spawn import prestart_launch, spawn_supervisor
from air_skills.runtime.store.estimates import class_estimates, with_prior
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store

# A RUNNING record whose supervisor has not reported within this time was never started.
SUPERVISOR_START_GRACE_S = 30.0


def cpu_slots() -> int:
    slots = settings.get("AIR_CPU_SLOTS")  # None when unset or bad: the machine's cores
    return slots or _cpu_count()


@functools.cache
def _cpu_count() -> int:
    return os.cpu_count() or 1


_DEVICES_TTL_S = 1.0
_devices: tuple[object, float, tuple[int, ...]] | None = None  # (provider, read at, indices)


def gpu_indices() -> tuple[int, ...]:
    """The provider's GPU indices, read at most once a second (a pass runs after every job)."""
    global _devices
    prov = provider()
    now = time.monotonic()
    if _devices is None or _devices[0] is not prov or now - _devices[1] > _DEVICES_TTL_S:
        _devices = (prov, now, tuple(d.index for d in prov.devices()))
    return _devices[2]


def schedulable_gpus(store: Store) -> tuple[int, ...]:
    cordons = store.gpu_rows()
    return tuple(i for i in gpu_indices() if not (i in cordons and cordons[i]["cordoned"]))


def queue_window(n_gpus: int) -> int:
    """How many queued jobs a pass looks at (by priority, then age): the head of the queue.

    A pass runs after every job's exit, inside the write transaction that every other process
    waits for, and costs time in proportion to what it reads. A job deeper than this cannot
    start before those ahead of it anyway, except by backfill, whose depth this bounds (as
    Slurm's bf_max_job_test does; bench/packing.py measures it). ``AIR_QUEUE_WINDOW`` sets it.
    """
    return settings.get("AIR_QUEUE_WINDOW") or max(16, 2 * n_gpus)


def _learned(c: sqlite3.Connection, rows: list[sqlite3.Row]) -> dict[str, float]:
    """Learned estimates for the GPU jobs among ``rows`` that have no time limit (one query);
    a class with no success yet gets a prior from the others (estimates.with_prior)."""
    need = [r["job_class"] for r in rows if r["gpus_requested"] and not r["timeout_min"]]
    return with_prior(class_estimates(c, need), need) if need else {}


def _queued(row: sqlite3.Row, learned: dict[str, float]) -> QueuedJob:
    timeout = row["timeout_min"]
    # A user's time limit always wins over a guess from the job's class.
    guess = None if timeout else learned.get(row["job_class"])
    return QueuedJob(
        job_id=row["job_id"],
        gpus=row["gpus_requested"],
        priority=row["priority"],
        seq=row["seq"],
        queued_at=row["created_at"],
        project=row["project"],
        duration_est_s=timeout * 60 if timeout else guess,
        learned=guess is not None,
    )


def _running(row: sqlite3.Row, learned: dict[str, float]) -> RunningJob:
    timeout = row["timeout_min"]
    start = row["started_at"]
    guess = None if timeout else learned.get(row["job_class"])
    limit = timeout * 60 if timeout else guess
    return RunningJob(
        job_id=row["job_id"],
        gpus=tuple(json.loads(row["gpus"])),
        priority=row["priority"],
        preemptible=bool(row["preemptible"]),
        started_at=row["started_at"] or 0.0,
        project=row["project"],
        borrowing=bool(row["borrowing"]),
        stopping=row["stop_request"] is not None,
        expected_end=(start + limit) if limit and start else None,
        end_guessed=guess is not None,
    )


@dataclass
class PassResult:
    """What one pass decided, to act on once its transaction is committed."""

    started: list[str] = field(default_factory=list)
    rows: dict[str, JobRecord] = field(default_factory=dict)  # the caller's job's record
    to_signal: list[tuple[int, str | None]] = field(default_factory=list)  # supervisors to poke
    caller_job: str | None = None  # the started job that the calling supervisor runs itself
    to_idle: dict[str, tuple[int, str]] = field(default_factory=dict)  # job -> idle supervisor


def _nothing_can_start(
    c: sqlite3.Connection, running_rows: list[sqlite3.Row], gpus: tuple[int, ...], slots: int
) -> bool:
    """True when no queued job can start or preempt: every GPU busy, no CPU slot or CPU job
    to use one, and nothing running that may be preempted (quotas are checked by the caller).
    """
    held = {g for r in running_rows for g in json.loads(r["gpus"])}
    if any(g not in held for g in gpus):
        return False
    if any(r["preemptible"] and r["gpus"] != "[]" for r in running_rows):
        return False
    cpu_jobs = sum(1 for r in running_rows if r["gpus"] == "[]")
    return cpu_jobs >= slots or not q.cpu_job_queued(c)


def run_pass(
    store: Store,
    c: sqlite3.Connection,
    gpus: tuple[int, ...],
    caller: tuple[int, str] | None = None,
    new_job: str | None = None,
) -> PassResult:
    """One scheduling pass inside the caller's transaction ``c``; act on it with act_on_pass.

    ``caller``: (pid, start time) of a supervisor that will run the first started job itself.
    ``new_job``: a job just queued; when nothing can start (a busy pool, the common case of a
    launch) only its waiting reason is written, instead of reading the head of the queue.
    """
    result = PassResult()
    slots = cpu_slots()
    quotas = q.quotas(c)
    running_rows = q.running(c)
    busy = not quotas and _nothing_can_start(c, running_rows, gpus, slots)
    if busy:
        queued_rows = []
        if new_job is not None:
            queued_rows = q.queued_job(c, new_job)
    else:
        # The head, and past it what fits the idle GPUs; with quotas each project's head
        # (its place in its own queue decides what is within its quota): never all of it.
        held = {g for r in running_rows for g in json.loads(r["gpus"])}
        idle = sum(1 for g in gpus if g not in held)
        queued_rows = q.queued(c, queue_window(len(gpus)), idle, per_project=bool(quotas))
    if not queued_rows and (busy or not running_rows):
        return result
    inv = Inventory(
        gpus=gpus,
        cpu_slots=slots,
        quotas=quotas,
        starvation_s=settings.get("AIR_STARVATION_S"),
        # Opt-in: jobs submitted up to N after a starving head may still pass it (bounded).
        bypass_jobs=settings.get("AIR_BYPASS_JOBS"),
    )
    # Busy: nothing can start, so no estimate can change the decision; skip the query.
    learned = {} if busy else _learned(c, queued_rows + running_rows)
    decision = schedule(
        [_queued(r, learned) for r in queued_rows],
        [_running(r, learned) for r in running_rows],
        inv,
        time.time(),
    )
    by_id = {r["job_id"]: r for r in running_rows}
    for job_id in decision.preempts:
        why = decision.preempt_reasons.get(job_id, "preempted for a higher-priority job")
        if store.request_stop(c, job_id, "preempt", why):
            row = by_id[job_id]
            if row["supervisor_pid"]:
                result.to_signal.append((row["supervisor_pid"], row["supervisor_start"]))
    n_running = len(running_rows) + len(decision.starts)
    queued = {r["job_id"]: r for r in queued_rows}
    share = max(1, slots // max(1, n_running))
    for start in decision.starts:
        cpus = queued[start.job_id]["want_cpus"] or share
        if store.mark_running(c, start.job_id, list(start.gpus), cpus, start.borrowing):
            result.started.append(start.job_id)
    for job_id, borrowing in decision.relabels.items():  # quota use changed: who borrows
        q.set_borrowing(c, job_id, borrowing)
    cordoned = len(gpu_indices()) - len(gpus)
    for job_id, reason in decision.reasons.items():
        if cordoned and queued[job_id]["gpus_requested"]:
            if not gpus:
                reason = (
                    f"every GPU ({cordoned}) is cordoned: the job waits, nothing is lost,"
                    " until one is uncordoned (`air gpus`, `air uncordon GPU`)"
                )
            elif reason.startswith("waiting for") and "GPUs" in reason:
                reason += f"; {cordoned} cordoned (`air gpus`)"
        if queued[job_id]["message"] != f"QUEUED: {reason}":  # write only what changed
            q.set_waiting_reason(c, job_id, f"QUEUED: {reason}")
    waiting = list(result.started)
    if caller is not None and waiting:
        result.caller_job = waiting.pop(0)
        store.set_supervisor(result.caller_job, *caller, c=c)
    for job_id in waiting:  # an idle supervisor starts a job at once: no process to create
        idle = store.claim_idle(c, _supervisor_alive, tracked=bool(queued[job_id]["track"]))
        if idle is None:
            break
        store.set_supervisor(job_id, *idle, c=c)
        result.to_idle[job_id] = idle
    if result.caller_job is not None:  # the others' records are read by whoever starts them
        mine = store.row_in(c, result.caller_job)
        assert mine is not None  # marked RUNNING in this very transaction
        result.rows[result.caller_job] = mine
    return result


def act_on_pass(store: Store, result: PassResult) -> None:
    """Once the pass is committed: hand started jobs to idle supervisors, start supervisors
    for the others, and poke the supervisors of preempted jobs."""
    lost: set[str] = set()
    for job_id, (pid, _) in result.to_idle.items():
        try:
            os.kill(pid, POKE_SIGNAL)
        except ProcessLookupError:  # it died since it was claimed: take the job back
            with store.tx() as c:
                store.set_supervisor(job_id, None, None, c=c, only_if=pid)
            lost.add(job_id)
    for pid, start_time in result.to_signal:
        if proc.alive(pid, start_time):
            try:
                os.kill(pid, POKE_SIGNAL)
            except ProcessLookupError:
                pass
    registered: list[tuple[str, tuple[int, str], tuple[int, str] | None, str]] = []
    failed = False
    for job_id in result.started:
        if job_id == result.caller_job or (job_id in result.to_idle and job_id not in lost):
            continue
        row = store.row(job_id)
        if row is None or row.status != "RUNNING" or row.supervisor_pid is not None:
            continue  # settled meanwhile by another process
        try:
            row = job_run.make_run_in_sql(store, row)  # a pending run: the command need not wait
            launch = prestart_launch(store.home, row)
        except Exception as exc:  # that job's start failed (its folder gone): that job only
            program = row.spec_dict()["command"][0]
            outcome = start_failed(type(exc).__name__, str(exc), program)
            failed |= record_without_supervisor(store, row, outcome)
            continue
        pids = spawn_supervisor(store.home, job_id, launch)
        if pids is not None:
            sup, job = pids
            registered.append(
                (
                    job_id,
                    (sup, proc.start_time(sup) or ""),
                    (job, proc.start_time(job) or "") if job else None,
                    running_message(row.gpu_list()),
                )
            )
    if registered:
        # Recorded at once, so that a supervisor lost while it boots leaves no orphan command.
        with store.tx() as c:
            for job_id, sup_ids, job_ids, message in registered:
                store.set_processes(c, job_id, sup_ids, job_ids, message)
    if failed:  # the GPUs of a job that could not start go to the next in the queue
        schedule_pass(store)


def schedule_pass(store: Store, new_job: str | None = None) -> list[str]:
    """Run one scheduling pass; start supervisors for the jobs it starts. Returns their ids.

    ``new_job``: the job just queued, if that is why the pass runs (see run_pass).
    """
    gpus = schedulable_gpus(store)
    with store.tx() as c:
        result = run_pass(store, c, gpus, new_job=new_job)
    act_on_pass(store, result)
    return result.started


def running_message(gpus: list[int]) -> str:
    return f"RUNNING on GPUs {gpus}" if gpus else "RUNNING on CPU"


def signal_stop(row: JobRecord) -> None:
    """Tell a running job's supervisor to act on its stop request now."""
    if row.supervisor_pid and proc.alive(row.supervisor_pid, row.supervisor_start):
        try:
            os.kill(row.supervisor_pid, POKE_SIGNAL)
        except ProcessLookupError:
            pass


_watched: dict[tuple[int, str | None], int] = {}  # supervisor (pid, start) -> its pidfd


def _supervisor_alive(pid: int, start: str | None) -> bool:
    """proc.alive, cheaper when asked again: the process is checked once (pid and start
    time), then watched through a pidfd, which turns readable when it exits (no pid reuse)."""
    key = (pid, start)
    fd = _watched.get(key)
    if fd is None:
        if not proc.alive(pid, start):
            return False
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return True  # no pidfd here (or it just exited): the plain check said alive
        if len(_watched) >= 256:
            for old in _watched.values():
                os.close(old)
            _watched.clear()
        _watched[key] = fd
        if not proc.alive(pid, start):  # the pid was reused before the pidfd was opened
            return not _forget(key)
    if select.select([fd], [], [], 0)[0]:
        return not _forget(key)
    return True


def _forget(key: tuple[int, str | None]) -> bool:
    fd = _watched.pop(key, None)
    if fd is not None:
        os.close(fd)
    return True


def reconcile(store: Store) -> int:
    """Settle RUNNING records whose supervisor is gone. Returns how many were settled."""
    rows = store.running_rows("local")
    now = time.time()
    settled = 0
    for row in rows:
        pid, start = row.supervisor_pid, row.supervisor_start
        if pid is None:
            if now - (row.started_at or now) < SUPERVISOR_START_GRACE_S:
                continue
            what = "its supervisor never started"
        elif _supervisor_alive(pid, start):
            continue
        else:
            what = "its supervisor died"
        _stop_leftovers(store, row)
        settled += _settle_lost(store, row, what)
    if settled:
        schedule_pass(store)
    return settled


def _stop_leftovers(store: Store, row: JobRecord) -> None:
    """Stop what a lost job left running. Best effort: whatever its folder holds (a FIFO, a
    bad record), the job is settled after it and the reconcile goes on to the next."""
    try:
        # An orphaned command must not keep running on GPUs that we are about to hand out.
        if row.job_pid and proc.alive(row.job_pid, row.job_start):
            proc.kill_group(row.job_pid)
        # Nor what left that group (torchrun's ranks, each in its own session): found by the
        # attempt's AIR_JOB_ID and AIR_ATTEMPT, so a retry started meanwhile is spared.
        proc.sweep_job(row.job_id, row.attempts)
        # Nor its container, which outlives the engine's client: removed by its job's name.
        image = container.load(job_dir(store.home, row.job_id))
        if image is not None:
            container.remove(image.engine, row.job_id, env=image.engine_env)
    except Exception:  # the job is settled all the same: the queue must not wait on it
        pass


def _settle_lost(store: Store, row: JobRecord, what: str) -> int:
    """Record the end of a job whose supervisor is lost (outcomes.py: an infra failure)."""
    job_id = row.job_id
    end = AttemptEnd(
        job_id,
        # A preempt request counts for nothing once the supervisor is lost: the job goes back
        # to the queue as an infra failure (and uses an infra retry), as with no request.
        stop_request="cancel" if row.stop_request == "cancel" else None,
        stop_reason=row.stop_reason,
        infra=InfraFailure(what, "lost"),
        infra_retries=row.infra_retries,
    )
    return int(record_without_supervisor(store, row, classify(end)))
