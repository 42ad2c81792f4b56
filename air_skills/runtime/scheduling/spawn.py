"""Starting a job's supervisor: detached (double fork), its command started first when it can."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from air_skills.gpu.providers import provider
from air_skills.home import append_job_file, job_dir
from air_skills.runtime.execution.launch_env import command_launch
from air_skills.runtime.process import proc
from air_skills.runtime.process.signals import POKE_SIGNAL, wait_exit
from air_skills.runtime.runs import job_run
from air_skills.runtime.store.records import JobRecord

# A command started before its supervisor gets this long (or until it exits) before the
# supervisor's interpreter boots beside it: on a small machine the boot would slow the job's
# own start, which is what a user waits for. Cancel, timeout and exit are handled after it.
SUPERVISOR_DEFER_S = 0.05


def prestart_launch(home: Path, row: JobRecord) -> Any:
    """How to start the job's command at once, before its supervisor boots; None if it must wait.

    The supervisor runs the preflight itself when there is anything to look at: a deep
    (torch) check asked for, or the quick check finding a fault or a problem with the check.
    It also makes the job's MLflow run first when the launch left that to it (job_run.py).
    """
    if job_run.is_pending(home, row):
        return None
    spec = row.spec_dict()
    gpus = row.gpu_list()
    # A retry after an infra failure may owe a deep check (runtime/results/nccl.py): the
    # supervisor's.
    retry = row.failure_kind == "infra"
    if gpus and (spec.get("deep_preflight") or retry or provider().faults(gpus)):
        return None
    return command_launch(home, row, spec, gpus)


_FORK_LOCK = threading.Lock()


def _fork() -> int:
    """``os.fork()`` with the garbage collector off across it, and left off in the child.

    The children run Python until they exec. In a process with threads (a study host, the MCP
    server) a collection there can finalize an object whose C library holds a lock that
    another thread had at the fork: sqlite3_free waiting on SQLite's mutex forever, seen once
    in 100 hosted studies (a child that never execs; its job's supervisor never starts). The
    lock keeps one thread's re-enable from landing inside another's fork.
    """
    with _FORK_LOCK:
        collecting = gc.isenabled()
        gc.disable()
        pid = -1
        try:
            pid = os.fork()
        finally:
            if pid != 0 and collecting:
                gc.enable()
    return pid


# The supervisor's argument instead of a job id: start idle, waiting for a pass to hand it one.
IDLE = "--idle"


def spawn_supervisor(home: Path, job_id: str, launch: Any = None) -> tuple[int, int] | None:
    """Start the job's supervisor in its own session, detached (double fork: no zombie).
    ``job_id`` IDLE: an idle supervisor, for a first job not launched yet (idle_ahead).

    With ``launch`` (a launch_env.CommandLaunch), the forked child starts the command first,
    a C-level fork/exec, and only then becomes the supervisor (exec keeps the pid, so the
    command stays its child): the job does not wait for a Python interpreter to boot.
    Returns (supervisor pid, command pid or 0 if it could not start) in that case.
    """
    folder = home if job_id == IDLE else job_dir(home, job_id)
    err_path = os.fspath(folder / "supervisor.log")
    argv = [sys.executable, "-m", "air_skills.runtime.supervision.supervisor", job_id]
    env = {**os.environ, "AIR_HOME": os.fspath(home)}
    read_end, write_end = os.pipe() if launch is not None else (-1, -1)
    pid = _fork()
    if pid == 0:  # child: no return from here, whatever happens
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            # This is still a copy of the spawning process: its Python signal handlers are not
            # for here (until exec, which resets them; the command starts with defaults too).
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            # Before the command starts: whatever it leaves behind (setsid) comes back to us.
            proc.become_subreaper()
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
            try:
                err = append_job_file(err_path)  # a FIFO there: refused, never waited on
            except OSError:  # the job's folder is gone: the supervisor still records why
                err = null
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


def idle_ahead(home: Path, store: Any) -> bool:
    """Start an idle supervisor for this home when none waits (a long-lived launcher's
    warm-up): the first launch then hands its job over, as every later one does, instead of
    forking a supervisor inside the launch (issue 24: the first launch 4-7x the later ones).
    It waits AIR_SUPERVISOR_LINGER_S, then exits. Whether one was started."""
    (idle,) = store.read("SELECT count(*) FROM idle_supervisors", ())[0]
    if idle:
        return False
    spawn_supervisor(home, IDLE)
    return True
