"""The local backend: daemonless. Scheduling passes run in whichever process changed state.

A pass is one transaction: read the queue, the running jobs and the GPU pool, call the pure
scheduler, record its decisions. Supervisors are started (double fork, own session) after the
commit; preemptions and cancels are sent to supervisors as SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

from air_skills import proc
from air_skills.gpus import provider
from air_skills.scheduler import Inventory, QueuedJob, RunningJob, schedule
from air_skills.store import Store

# A RUNNING record whose supervisor has not reported within this time was never started.
SUPERVISOR_START_GRACE_S = 30.0
MAX_INFRA_RETRIES = int(os.environ.get("AIR_MAX_INFRA_RETRIES", "3"))


def cpu_slots() -> int:
    env = os.environ.get("AIR_CPU_SLOTS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return os.cpu_count() or 1


def schedulable_gpus(store: Store) -> tuple[int, ...]:
    cordons = store.gpu_rows()
    return tuple(
        d.index
        for d in provider().devices()
        if not (d.index in cordons and cordons[d.index]["cordoned"])
    )


def thread_caps(cpus: int) -> dict[str, str]:
    value = str(cpus)
    names = (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "TORCH_NUM_THREADS",
        "RAYON_NUM_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "TF_NUM_INTEROP_THREADS",
    )
    return {n: value for n in names}


def _queued(row: sqlite3.Row) -> QueuedJob:
    spec = json.loads(row["spec"])
    timeout = spec.get("timeout_min")
    return QueuedJob(
        job_id=row["job_id"],
        gpus=row["gpus_requested"],
        priority=row["priority"],
        seq=row["seq"],
        queued_at=row["created_at"],
        project=row["project"],
        duration_est_s=timeout * 60 if timeout else None,
    )


def _running(row: sqlite3.Row) -> RunningJob:
    spec = json.loads(row["spec"])
    timeout = spec.get("timeout_min")
    return RunningJob(
        job_id=row["job_id"],
        gpus=tuple(json.loads(row["gpus"])),
        priority=row["priority"],
        preemptible=bool(row["preemptible"]),
        started_at=row["started_at"] or 0.0,
        project=row["project"],
        borrowing=bool(row["borrowing"]),
        stopping=row["stop_request"] is not None,
        expected_end=(row["started_at"] + timeout * 60) if timeout and row["started_at"] else None,
    )


def schedule_pass(store: Store) -> list[str]:
    """Run one scheduling pass; start supervisors for the jobs it starts. Returns their ids."""
    gpus = schedulable_gpus(store)
    slots = cpu_slots()
    to_signal: list[tuple[int, str | None]] = []
    started: list[str] = []
    with store.tx() as c:
        queued_rows = c.execute(
            "SELECT * FROM jobs WHERE status='QUEUED' AND backend='local' ORDER BY seq"
        ).fetchall()
        running_rows = c.execute(
            "SELECT * FROM jobs WHERE status='RUNNING' AND backend='local'"
        ).fetchall()
        if not queued_rows and not running_rows:
            return []
        quotas = {r["project"]: r["gpus"] for r in c.execute("SELECT * FROM quotas")}
        inv = Inventory(
            gpus=gpus,
            cpu_slots=slots,
            quotas=quotas,
            starvation_s=float(os.environ.get("AIR_STARVATION_S", "30")),
        )
        decision = schedule(
            [_queued(r) for r in queued_rows], [_running(r) for r in running_rows], inv, time.time()
        )
        by_id = {r["job_id"]: r for r in running_rows}
        for job_id in decision.preempts:
            why = decision.preempt_reasons.get(job_id, "preempted for a higher-priority job")
            if store.request_stop(c, job_id, "preempt", why):
                row = by_id[job_id]
                if row["supervisor_pid"]:
                    to_signal.append((row["supervisor_pid"], row["supervisor_start"]))
        n_running = len(running_rows) + len(decision.starts)
        specs = {r["job_id"]: json.loads(r["spec"]) for r in queued_rows}
        share = max(1, slots // max(1, n_running))
        for start in decision.starts:
            cpus = specs[start.job_id].get("cpus") or share
            if store.start(c, start.job_id, list(start.gpus), cpus, start.borrowing):
                started.append(start.job_id)
        for job_id, borrowing in decision.relabels.items():  # quota use changed: who borrows
            c.execute(
                "UPDATE jobs SET borrowing=? WHERE job_id=? AND status='RUNNING'",
                (int(borrowing), job_id),
            )
        for job_id, reason in decision.reasons.items():
            c.execute(
                "UPDATE jobs SET message=? WHERE job_id=? AND status='QUEUED' AND message != ?",
                (f"QUEUED: {reason}", job_id, f"QUEUED: {reason}"),
            )
    for pid, start_time in to_signal:
        if proc.alive(pid, start_time):
            os.kill(pid, signal.SIGTERM)
    for job_id in started:
        spawn_supervisor(store.home, job_id)
    return started


def spawn_supervisor(home: Path, job_id: str) -> None:
    """Start the job's supervisor in its own session, detached (double fork: no zombie)."""
    err_path = os.fspath(home / "jobs" / job_id / "supervisor.log")
    argv = [sys.executable, "-m", "air_skills.supervisor", job_id]
    env = {**os.environ, "AIR_HOME": os.fspath(home)}
    pid = os.fork()
    if pid == 0:  # child: only os calls until exec
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            null = os.open(os.devnull, os.O_RDWR)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(err, 2)
            os.execve(sys.executable, argv, env)
        finally:
            os._exit(127)
    os.waitpid(pid, 0)


def signal_stop(row: sqlite3.Row) -> None:
    """Tell a running job's supervisor to act on its stop request now."""
    if row["supervisor_pid"] and proc.alive(row["supervisor_pid"], row["supervisor_start"]):
        try:
            os.kill(row["supervisor_pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass


def reconcile(store: Store) -> int:
    """Settle RUNNING records whose supervisor is gone. Returns how many were settled."""
    rows = store.rows("WHERE status='RUNNING' AND backend='local'")
    now = time.time()
    settled = 0
    for row in rows:
        pid, start = row["supervisor_pid"], row["supervisor_start"]
        if pid is None:
            if now - (row["started_at"] or now) < SUPERVISOR_START_GRACE_S:
                continue
            what = "its supervisor never started"
        elif proc.alive(pid, start):
            continue
        else:
            what = "its supervisor died"
        # An orphaned command must not keep running on GPUs that we are about to hand out.
        if row["job_pid"] and proc.alive(row["job_pid"], row["job_start"]):
            proc.kill_group(row["job_pid"])
        settled += _settle_lost(store, row, what)
    if settled:
        schedule_pass(store)
    return settled


def _settle_lost(store: Store, row: sqlite3.Row, what: str) -> int:
    job_id = row["job_id"]
    stop = row["stop_request"]
    with store.tx() as c:
        current = c.execute("SELECT status FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if current is None or current["status"] != "RUNNING":
            return 0
        if stop == "cancel":
            from air_skills.status import JobStatus

            store.finish(
                job_id, JobStatus.CANCELLED, message=f"CANCELLED: {row['stop_reason']}", c=c
            )
        elif row["infra_retries"] < MAX_INFRA_RETRIES:
            store.requeue(
                job_id,
                kind="infra",
                message=f"QUEUED: requeued after an infra failure ({what}); it restarts with the"
                " same id and checkpoint folder",
                c=c,
            )
        else:
            from air_skills.status import JobStatus

            store.finish(
                job_id,
                JobStatus.FAILED,
                failure_kind="infra",
                message=f"FAILED (infra): {what}; infra retries spent."
                " Next: check `air doctor`, then relaunch",
                c=c,
            )
    return 1
