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
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.gpu.providers import provider
from air_skills.runtime import proc
from air_skills.runtime.scheduler import Inventory, QueuedJob, RunningJob, schedule
from air_skills.runtime.store import Store

# A RUNNING record whose supervisor has not reported within this time was never started.
SUPERVISOR_START_GRACE_S = 30.0
# Sent to a supervisor to say "read the state now": its job's stop request (cancel, preempt),
# or, when it is idle, the job that a pass handed to it. Not SIGTERM: a poke that arrives
# late, for a job that has already ended, is harmless.
POKE_SIGNAL = signal.SIGUSR1
# A command started before its supervisor gets this long (or until it exits) before the
# supervisor's interpreter boots beside it: on a small machine the boot would slow the job's
# own start, which is what a user waits for. Cancel, timeout and exit are handled after it.
SUPERVISOR_DEFER_S = 0.05
MAX_INFRA_RETRIES = int(os.environ.get("AIR_MAX_INFRA_RETRIES", "3"))


def cpu_slots() -> int:
    env = os.environ.get("AIR_CPU_SLOTS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return _cpu_count()


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


# Columns a pass reads: no spec JSON parsed in Python, only what the scheduler needs.
_PASS_COLUMNS = (
    "job_id, seq, gpus_requested, priority, preemptible, created_at, started_at, project,"
    " borrowing, stop_request, gpus, message, supervisor_pid, supervisor_start,"
    " json_extract(spec, '$.timeout_min') AS timeout_min, json_extract(spec, '$.cpus') AS want_cpus"
)


def queue_window(n_gpus: int) -> int:
    """How many queued jobs a pass looks at (by priority, then age): the head of the queue.

    A pass runs after every job's exit, inside the write transaction that every other process
    waits for, and costs time in proportion to what it reads. A job deeper than this cannot
    start before those ahead of it anyway, except by backfill, whose depth this bounds (as
    Slurm's bf_max_job_test does; bench/packing.py measures it). ``AIR_QUEUE_WINDOW`` sets it.
    """
    env = os.environ.get("AIR_QUEUE_WINDOW", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(16, 2 * n_gpus)


def _queued(row: sqlite3.Row) -> QueuedJob:
    timeout = row["timeout_min"]
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
    timeout = row["timeout_min"]
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


def _queued_rows(c: sqlite3.Connection, window: int | None) -> list[sqlite3.Row]:
    """The queue, or (``window``) its head by priority then age, plus the head of CPU jobs."""
    if window is None:
        return c.execute(
            f"SELECT {_PASS_COLUMNS} FROM jobs WHERE status='QUEUED' AND backend='local'"
            " ORDER BY seq"
        ).fetchall()
    head = c.execute(
        f"SELECT {_PASS_COLUMNS} FROM jobs INDEXED BY jobs_queue"
        " WHERE status='QUEUED' AND backend='local' ORDER BY priority DESC, seq LIMIT ?",
        (window,),
    ).fetchall()
    if len(head) == window:
        # CPU jobs deeper in the queue still get free CPU slots (they never wait for GPUs).
        seen = {r["seq"] for r in head}
        cpu = c.execute(
            f"SELECT {_PASS_COLUMNS} FROM jobs INDEXED BY jobs_queue_cpu WHERE status='QUEUED'"
            " AND gpus_requested=0 AND backend='local' ORDER BY priority DESC, seq LIMIT ?",
            (window,),
        ).fetchall()
        head += [r for r in cpu if r["seq"] not in seen]
    return sorted(head, key=lambda r: r["seq"])


@dataclass
class PassResult:
    """What one pass decided, to act on once its transaction is committed."""

    started: list[str] = field(default_factory=list)
    rows: dict[str, sqlite3.Row] = field(default_factory=dict)  # the adopted job's record
    to_signal: list[tuple[int, str | None]] = field(default_factory=list)  # supervisors to poke
    adopted: str | None = None  # the started job that the calling supervisor runs itself
    handed: dict[str, tuple[int, str]] = field(default_factory=dict)  # job -> idle supervisor


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
    return (
        cpu_jobs >= slots
        or not c.execute(
            "SELECT 1 FROM jobs INDEXED BY jobs_queue_cpu WHERE status='QUEUED'"
            " AND gpus_requested=0 AND backend='local' ORDER BY priority DESC, seq LIMIT 1"
        ).fetchone()
    )


def pass_in_tx(
    store: Store,
    c: sqlite3.Connection,
    gpus: tuple[int, ...],
    adopt: tuple[int, str] | None = None,
    new_job: str | None = None,
) -> PassResult:
    """One scheduling pass inside the caller's transaction ``c``; act on it with after_pass.

    ``adopt``: (pid, start time) of a supervisor that will run the first started job itself.
    ``new_job``: a job just queued; when nothing can start (a busy pool, the common case of a
    launch) only its waiting reason is written, instead of reading the head of the queue.
    """
    result = PassResult()
    slots = cpu_slots()
    quotas = {r["project"]: r["gpus"] for r in c.execute("SELECT * FROM quotas")}
    running_rows = c.execute(
        f"SELECT {_PASS_COLUMNS} FROM jobs WHERE status='RUNNING' AND backend='local'"
    ).fetchall()
    busy = not quotas and _nothing_can_start(c, running_rows, gpus, slots)
    if busy:
        queued_rows = []
        if new_job is not None:
            queued_rows = c.execute(
                f"SELECT {_PASS_COLUMNS} FROM jobs WHERE job_id=? AND status='QUEUED'",
                (new_job,),
            ).fetchall()
    else:
        # With quotas every project's place in the queue matters: the pass reads all of it.
        queued_rows = _queued_rows(c, None if quotas else queue_window(len(gpus)))
    if not queued_rows and (busy or not running_rows):
        return result
    inv = Inventory(
        gpus=gpus,
        cpu_slots=slots,
        quotas=quotas,
        starvation_s=float(os.environ.get("AIR_STARVATION_S", "30")),
        # Opt-in: jobs submitted up to N after a starving head may still pass it (bounded).
        bypass_jobs=int(os.environ.get("AIR_BYPASS_JOBS", "0") or 0),
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
                result.to_signal.append((row["supervisor_pid"], row["supervisor_start"]))
    n_running = len(running_rows) + len(decision.starts)
    queued = {r["job_id"]: r for r in queued_rows}
    share = max(1, slots // max(1, n_running))
    for start in decision.starts:
        cpus = queued[start.job_id]["want_cpus"] or share
        if store.start(c, start.job_id, list(start.gpus), cpus, start.borrowing):
            result.started.append(start.job_id)
    for job_id, borrowing in decision.relabels.items():  # quota use changed: who borrows
        c.execute(
            "UPDATE jobs SET borrowing=? WHERE job_id=? AND status='RUNNING'",
            (int(borrowing), job_id),
        )
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
            c.execute(
                "UPDATE jobs SET message=? WHERE job_id=? AND status='QUEUED'",
                (f"QUEUED: {reason}", job_id),
            )
    waiting = list(result.started)
    if adopt is not None and waiting:
        result.adopted = waiting.pop(0)
        store.set_supervisor(result.adopted, *adopt, c=c)
    for job_id in waiting:  # an idle supervisor starts a job at once: no process to create
        idle = store.claim_idle(c, _supervisor_alive)
        if idle is None:
            break
        store.set_supervisor(job_id, *idle, c=c)
        result.handed[job_id] = idle
    if result.adopted is not None:  # the others' records are read by whoever starts them
        result.rows[result.adopted] = c.execute(
            "SELECT * FROM jobs WHERE job_id=?", (result.adopted,)
        ).fetchone()
    return result


def after_pass(store: Store, result: PassResult) -> None:
    """Once the pass is committed: hand started jobs to idle supervisors, start supervisors
    for the others, and poke the supervisors of preempted jobs."""
    lost: set[str] = set()
    for job_id, (pid, _) in result.handed.items():
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
    for job_id in result.started:
        if job_id == result.adopted or (job_id in result.handed and job_id not in lost):
            continue
        row = store.row(job_id)
        if row is None or row["status"] != "RUNNING" or row["supervisor_pid"] is not None:
            continue  # settled meanwhile by another process
        launch = prestart_launch(store.home, row)
        pids = spawn_supervisor(store.home, job_id, launch)
        if pids is not None:
            sup, job = pids
            registered.append(
                (
                    job_id,
                    (sup, proc.start_time(sup) or ""),
                    (job, proc.start_time(job) or "") if job else None,
                    running_message(json.loads(row["gpus"])),
                )
            )
    if registered:
        # Recorded at once, so that a supervisor lost while it boots leaves no orphan command.
        with store.tx() as c:
            for job_id, sup_ids, job_ids, message in registered:
                store.set_processes(c, job_id, sup_ids, job_ids, message)


def schedule_pass(store: Store, new_job: str | None = None) -> list[str]:
    """Run one scheduling pass; start supervisors for the jobs it starts. Returns their ids.

    ``new_job``: the job just queued, if that is why the pass runs (see pass_in_tx).
    """
    gpus = schedulable_gpus(store)
    with store.tx() as c:
        result = pass_in_tx(store, c, gpus, new_job=new_job)
    after_pass(store, result)
    return result.started


def running_message(gpus: list[int]) -> str:
    return f"RUNNING on GPUs {gpus}" if gpus else "RUNNING on CPU"


def prestart_launch(home: Path, row: sqlite3.Row) -> Any:
    """How to start the job's command at once, before its supervisor boots; None if it must wait.

    The supervisor runs the preflight itself when there is anything to look at: a deep
    (torch) check asked for, or the quick check finding a fault or a problem with the check.
    """
    from air_skills.runtime.launch_env import command_launch

    spec = json.loads(row["spec"])
    gpus = json.loads(row["gpus"])
    if gpus and (spec.get("deep_preflight") or provider().faults(gpus)):
        return None
    return command_launch(home, row, spec, gpus)


def spawn_supervisor(home: Path, job_id: str, launch: Any = None) -> tuple[int, int] | None:
    """Start the job's supervisor in its own session, detached (double fork: no zombie).

    With ``launch`` (a supervisor.CommandLaunch), the forked child starts the command first,
    a C-level fork/exec, and only then becomes the supervisor (exec keeps the pid, so the
    command stays its child): the job does not wait for a Python interpreter to boot.
    Returns (supervisor pid, command pid or 0 if it could not start) in that case.
    """
    err_path = os.fspath(home / "jobs" / job_id / "supervisor.log")
    argv = [sys.executable, "-m", "air_skills.runtime.supervisor", job_id]
    env = {**os.environ, "AIR_HOME": os.fspath(home)}
    read_end, write_end = os.pipe() if launch is not None else (-1, -1)
    pid = os.fork()
    if pid == 0:  # child: no return from here, whatever happens
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            # This is still a copy of the spawning process: its Python signal handlers are not
            # for here (until exec, which resets them; the command starts with defaults too).
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            if launch is not None:
                os.close(read_end)
                job_pid = 0
                try:
                    # Keep the Popen object alive until exec: collected, it would reap a
                    # command that has already exited, and the supervisor would lose its status.
                    started = launch.popen()
                    job_pid = started.pid
                    argv += ["--job-pid", str(job_pid)]
                except Exception as exc:  # recorded by the supervisor, as when it starts it
                    argv += ["--start-error", f"{type(exc).__name__}:{exc}"]
            # Pokes before the supervisor's handler is set are ignored, not fatal: it reads
            # its stop request when it starts watching (ignored signals survive exec).
            signal.signal(POKE_SIGNAL, signal.SIG_IGN)
            if launch is not None:
                os.write(write_end, f"{os.getpid()} {job_pid}\n".encode())
                os.close(write_end)
                if job_pid:
                    wait_exit(job_pid, SUPERVISOR_DEFER_S)
            null = os.open(os.devnull, os.O_RDWR)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(err, 2)
            os.execve(sys.executable, argv, env)
        finally:
            os._exit(127)
    os.waitpid(pid, 0)
    if launch is None:
        return None
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 64):
        data += chunk
    os.close(read_end)
    try:
        sup, job = (int(x) for x in data.split())
    except ValueError:  # the child died before it could say: reconcile settles the record
        return None
    return sup, job


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for a child to exit, without reaping it; True if it has."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        time.sleep(timeout_s)
        return False
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def signal_stop(row: sqlite3.Row) -> None:
    """Tell a running job's supervisor to act on its stop request now."""
    if row["supervisor_pid"] and proc.alive(row["supervisor_pid"], row["supervisor_start"]):
        try:
            os.kill(row["supervisor_pid"], POKE_SIGNAL)
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
    rows = store.rows("WHERE status='RUNNING' AND backend='local'")
    now = time.time()
    settled = 0
    for row in rows:
        pid, start = row["supervisor_pid"], row["supervisor_start"]
        if pid is None:
            if now - (row["started_at"] or now) < SUPERVISOR_START_GRACE_S:
                continue
            what = "its supervisor never started"
        elif _supervisor_alive(pid, start):
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
