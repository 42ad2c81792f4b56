"""The supervisor: one small process per started job, in its own session.

It runs the GPU preflight, starts the command (argv, never a shell) in its own process group
with the job's environment, sends its output to the job's log, enforces the timeout, forwards
cancel and preemption (SIGTERM, then SIGKILL after a grace period), watches GPU health,
records the exit, ends the MLflow run, and runs a scheduling pass so queued jobs start at once.

Run as ``python -m air_skills.runtime.supervisor JOB_ID`` with AIR_HOME set; with
``--job-pid PID`` when the spawner already started the command (then it is this process's
child: the spawner's child started it and became this process by exec), or
``--start-error TEXT`` when that start failed. When its job ends, the supervisor records
the end and runs a scheduling pass in one transaction, and supervises the first job that
the pass starts itself, so a stream of short jobs costs no interpreter boot per job. With
none to run, it waits up to AIR_SUPERVISOR_LINGER_S as an idle supervisor: a pass that starts
a job hands it over (POKE_SIGNAL), and the job starts without a process being created.
A job runs in the environment it was launched from (its folder's env.json), whoever starts it.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills.gpu.providers import GpuFault, provider
from air_skills.runtime import passes as local
from air_skills.runtime import proc
from air_skills.runtime.launch_env import command_launch
from air_skills.runtime.passes import MAX_INFRA_RETRIES
from air_skills.runtime.store import Store
from air_skills.status import JobStatus

GRACE_S = float(os.environ.get("AIR_GRACE_S", "10"))
HEALTH_INTERVAL_S = float(os.environ.get("AIR_HEALTH_INTERVAL_S", "5"))
POLL_S = 0.05  # where the command's exit cannot be waited for (no pidfd): poll this often
# With no job to run, a supervisor waits this long for a pass to hand it one (no process to
# create then: the job starts at once); 0 to exit at once.
LINGER_S = float(os.environ.get("AIR_SUPERVISOR_LINGER_S", "60"))
_WAKE_FD: int | None = None  # read end of the signal wakeup pipe (set by main)


class _StartedChild:
    """A command that the spawner started before this interpreter booted (still our child)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours after all: its exit status is lost
                self.returncode = 255
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.01)
        return rc


_SELF_START: str | None = None
# POKE_SIGNAL arrived: read the state now. One flag for the process, so that a poke that comes
# while one job hands over to the next is not lost (a stale one costs one read).
_POKED = threading.Event()


def _self_start() -> str:
    global _SELF_START
    if _SELF_START is None:
        _SELF_START = proc.start_time(os.getpid()) or ""
    return _SELF_START


# A command that ends within this time of its start is not put on record as running (its end
# is, a moment later): a transaction less per short job. Anything longer is recorded then, so
# that were its supervisor lost, reconcile finds and stops it.
RECORD_AFTER_S = 0.002


def _record_command(store: Store, job_id: str, pid: int, gpus: list[int]) -> None:
    """Record a started command's pid and start time, unless it has already ended."""
    if not local.wait_exit(pid, RECORD_AFTER_S):
        store.set_running(job_id, pid, proc.start_time(pid) or "", local.running_message(gpus))


@dataclass
class Started:
    """A job given to this process (its own pass started it, or another's handed it over):
    its record, and its command when already started (or why that failed)."""

    row: Any
    child: subprocess.Popen[bytes] | None = None
    error: str | None = None


class Supervisor:
    def __init__(
        self,
        home: Path,
        job_id: str,
        store: Store | None = None,
        job_pid: int | None = None,
        start_error: str | None = None,
        started: Started | None = None,
    ) -> None:
        self.home = home
        self.job_id = job_id
        self.store = store or Store(home)
        self.job_pid = job_pid  # the command, when the spawner started it
        self.start_error = start_error  # why the spawner could not start it
        self.stop_signal = threading.Event()
        self._outcome: tuple[Callable[..., bool], tuple[Any, ...], dict[str, Any]] | None = None
        self.child: subprocess.Popen[bytes] | _StartedChild | None = None
        self._started = started  # given to this process: its row (and command, if started)
        if started is not None:
            self.child = started.child
            self.job_pid = started.child.pid if started.child else None
            self.start_error = started.error
        self.infra_faults: list[GpuFault] = []
        self.timed_out = False
        self._warm: threading.Thread | None = None

    # --- the whole life of one attempt ----------------------------------------------------

    def run(self) -> Started | None:
        """Supervise the attempt; returns a job that this process is to supervise next."""
        row = self._started.row if self._started else self.store.row(self.job_id)
        me = os.getpid()
        if row is None or row["status"] != "RUNNING" or row["supervisor_pid"] not in (None, me):
            if self.job_pid:  # started for a record that is not ours: it must not run alone
                proc.kill_group(self.job_pid)
            return None
        if row["supervisor_pid"] is None:
            self.store.set_supervisor(self.job_id, me, _self_start())
        signal.signal(signal.SIGTERM, lambda *_: self.stop_signal.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_signal.set())
        signal.signal(local.POKE_SIGNAL, lambda *_: _POKED.set())
        self.spec: dict[str, Any] = json.loads(row["spec"])
        self.gpus: list[int] = json.loads(row["gpus"])
        self.row = row
        if row["run_id"]:
            self._warm = threading.Thread(target=self._warm_mlflow, daemon=True)
            self._warm.start()
        self._attempt(row)
        return self._commit()

    def _commit(self) -> Started | None:
        """Record the attempt's end and run a scheduling pass, in one transaction.

        The jobs this attempt made room for start now, not at the next client call, and no
        other pass can see the GPUs free in between. The first job started is for this
        process to supervise next (unless it was asked to stop): its command starts here,
        once the transaction is committed (a start inside it would hold every other writer).
        """
        gpus = local.schedulable_gpus(self.store)
        adopt = None if self.stop_signal.is_set() else (os.getpid(), _self_start())
        try:
            with self.store.tx() as c:
                if self._outcome is not None:
                    change, args, kwargs = self._outcome
                    change(*args, c=c, **kwargs)
                result = local.pass_in_tx(self.store, c, gpus, adopt)
        except Exception:
            if self._outcome is not None:  # a failing pass must not lose the job's end
                change, args, kwargs = self._outcome
                change(*args, **kwargs)
            raise
        if result.adopted is None:
            local.after_pass(self.store, result)
            return None
        # Ours first: this process is the quickest start; the others' starts follow.
        started = self._start_adopted(result.rows[result.adopted])
        local.after_pass(self.store, result)
        return started

    def _start_adopted(self, row: Any) -> Started:
        """Start the command of a job that this process's pass gave to it, and record it.

        When the quick preflight finds anything (or a deep one is asked for), the command
        waits for _attempt, which runs the full preflight first.
        """
        launch = local.prestart_launch(self.home, row)
        if launch is None:
            return Started(row)
        try:
            child = launch.popen()
        except Exception as exc:  # recorded by _attempt_started, as when it starts it
            return Started(row, error=f"{type(exc).__name__}:{exc}")
        _record_command(self.store, row["job_id"], child.pid, json.loads(row["gpus"]))
        return Started(row, child)

    def _settle(self, change: Callable[..., bool], *args: Any, **kwargs: Any) -> None:
        """The attempt's end (store.finish or store.requeue), recorded by _commit."""
        self._outcome = (change, args, kwargs)

    def _attempt(self, row: Any) -> None:
        if self.job_pid is not None or self.start_error is not None:
            self._attempt_started(row)
            return
        if row["stop_request"] == "cancel":  # the row was read just now
            self._finish(JobStatus.CANCELLED, f"CANCELLED: {row['stop_reason']}")
            return
        checked = provider().faults(self.gpus) if self.gpus else []
        for note in dict.fromkeys(f.detail for f in checked if f.index < 0):
            self.store.event(self.job_id, "health-warning", f"GPU check problem: {note}")
        faults = [f for f in checked if f.critical and f.index >= 0]
        if faults:
            self._infra_failure(faults, "preflight")
            return
        if self.gpus and self.spec.get("deep_preflight"):
            from air_skills.gpu.deep_check import deep_preflight_faults

            faults = deep_preflight_faults(self.gpus, self.row["log_path"])
            if faults:
                self._infra_failure(faults, "deep preflight")
                return
        job_dir = self.home / "jobs" / self.job_id
        try:
            self.child = self._start(job_dir)
        except OSError as exc:
            self._start_failed(type(exc).__name__, str(exc))
            return
        _record_command(self.store, self.job_id, self.child.pid, self.gpus)
        rc = self._watch()
        self._record_exit(rc)

    def _attempt_started(self, row: Any) -> None:
        """The spawner ran the quick preflight and started the command before we booted."""
        if self.start_error is not None:
            kind, _, text = self.start_error.partition(":")
            self._start_failed(kind, text)
            return
        assert self.job_pid is not None
        if self.child is None:
            self.child = _StartedChild(self.job_pid)
        if self._started is None and row["job_pid"] != self.job_pid:  # not on record yet
            self.store.set_running(
                self.job_id,
                self.job_pid,
                proc.start_time(self.job_pid) or "",
                local.running_message(self.gpus),
            )
        rc = self._watch()
        self._record_exit(rc)

    def _start_failed(self, kind: str, text: str) -> None:
        """The command could not start (an OSError's class name and text): the user's to fix."""
        program = self.spec["command"][0]
        if kind == "FileNotFoundError":
            message = (
                f"FAILED: command not found: {program!r}."
                " Next: check the program name and PATH, then relaunch"
            )
            code = 127
        elif kind == "PermissionError":
            message = (
                f"FAILED: permission denied running {program!r}."
                " Next: make it executable or run it through its interpreter"
            )
            code = 126
        else:
            message = f"FAILED: {text or kind}. Next: fix the job's command or workdir"
            code = 126
        self._finish(JobStatus.FAILED, message, exit_code=code, failure_kind="user")

    def _start(self, job_dir: Path) -> subprocess.Popen[bytes]:
        return command_launch(self.home, self.row, self.spec, self.gpus).popen()

    def _watch(self) -> int:
        child = self.child
        assert child is not None
        timeout_min = self.spec.get("timeout_min")
        deadline = time.monotonic() + timeout_min * 60 if timeout_min else None
        next_health = time.monotonic() + HEALTH_INTERVAL_S
        # Started before this process could hear of a cancel: read the stop request at once.
        first_check = 0.0 if self.job_pid and self._started is None else 1.0
        next_db_check = time.monotonic() + first_check
        pidfd = _pidfd(child.pid)
        try:
            return self._watch_loop(child, deadline, next_health, next_db_check, pidfd)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _watch_loop(
        self,
        child: subprocess.Popen[bytes] | _StartedChild,
        deadline: float | None,
        next_health: float,
        next_db_check: float,
        pidfd: int | None,
    ) -> int:
        while True:
            rc = child.poll()
            if rc is not None:
                return rc
            now = time.monotonic()
            if _POKED.is_set():  # a stop request was recorded: read it now
                _POKED.clear()
                next_db_check = now
            if self.stop_signal.is_set() or (now >= next_db_check and self._stop_request()):
                return self._terminate()
            if now >= next_db_check:
                next_db_check = now + 1.0
            if deadline is not None and now >= deadline:
                self.timed_out = True
                return self._terminate()
            if self.gpus and now >= next_health:
                next_health = now + HEALTH_INTERVAL_S
                faults = [f for f in provider().faults(self.gpus) if f.critical and f.index >= 0]
                if faults:
                    self.infra_faults = faults
                    return self._terminate()
            wake = min(next_db_check, next_health if self.gpus else next_db_check)
            if deadline is not None:
                wake = min(wake, deadline)
            self._sleep(pidfd, wake - time.monotonic())

    def _sleep(self, pidfd: int | None, timeout_s: float) -> None:
        """Until the command exits, a signal arrives, or the timeout: no polling delay."""
        timeout_s = max(0.0, timeout_s)
        if pidfd is None or _WAKE_FD is None:
            self.stop_signal.wait(min(timeout_s, POLL_S))
            return
        ready, _, _ = select.select([pidfd, _WAKE_FD], [], [], timeout_s)
        if _WAKE_FD in ready:
            try:
                while os.read(_WAKE_FD, 256):
                    pass
            except BlockingIOError:
                pass

    def _terminate(self) -> int:
        child = self.child
        assert child is not None
        proc.kill_group(child.pid, signal.SIGTERM)
        try:
            return child.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill_group(child.pid, signal.SIGKILL)
            return child.wait()

    # --- outcomes ----------------------------------------------------------------------------

    def _record_exit(self, rc: int) -> None:
        assert self.child is not None
        # Whatever the command left behind in its group goes with it.
        proc.kill_group(self.child.pid, signal.SIGKILL)
        stop = self._stop_request()
        sig = proc.signal_name(-rc) if rc < 0 else None
        code = rc if rc >= 0 else None
        if stop == "cancel":
            reason = self.store.row(self.job_id)["stop_reason"]
            self._finish(JobStatus.CANCELLED, f"CANCELLED: {reason}", code, sig)
        elif stop == "preempt":
            why = self.store.row(self.job_id)["stop_reason"] or "preempted"
            self._settle(
                self.store.requeue,
                self.job_id,
                kind="preempted",
                message=f"QUEUED: {why}; it resumes with the same id and AIR_CHECKPOINT_DIR",
            )
        elif self.infra_faults:
            self._infra_failure(self.infra_faults, "while running")
        elif self.timed_out:
            self._finish(
                JobStatus.TIMED_OUT,
                f"TIMED_OUT: ran past timeout_min={self.spec.get('timeout_min')} and was stopped."
                " Next: raise timeout_min or save checkpoints to AIR_CHECKPOINT_DIR and relaunch",
                code,
                sig,
                failure_kind="user",
            )
        elif rc == 0:
            self._finish(JobStatus.SUCCEEDED, "SUCCEEDED: exited 0", 0)
        else:
            how = f"exited with code {rc}" if rc > 0 else f"was killed by {sig}"
            row = self.store.row(self.job_id)
            if row["user_retries"] < self.spec.get("max_retries", 0):
                self._settle(
                    self.store.requeue,
                    self.job_id,
                    kind="user",
                    message=f"QUEUED: {how}; retry {row['user_retries'] + 1} of"
                    f" {self.spec.get('max_retries')}",
                    exit_code=code,
                    signal=sig,
                )
                return
            self._finish(
                JobStatus.FAILED,
                f"FAILED: the command {how} (its own code failed)."
                f" Next: read `air logs {self.job_id}`, fix it, relaunch",
                code,
                sig,
                failure_kind="user",
            )

    def _infra_failure(self, faults: list[GpuFault], when: str) -> None:
        detail = "; ".join(f.describe() for f in faults)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for idx in sorted({f.index for f in faults}):
            reason = "; ".join(f"{f.kind}: {f.detail}" for f in faults if f.index == idx)
            self.store.cordon(
                idx, f"{reason} ({when}, job {self.job_id}, {stamp})", health="unhealthy"
            )
        row = self.store.row(self.job_id)
        if row["infra_retries"] < MAX_INFRA_RETRIES:
            self._settle(
                self.store.requeue,
                self.job_id,
                kind="infra",
                message=f"QUEUED: GPU fault {when} ({detail}); GPU cordoned, the job restarts on"
                " healthy GPUs (failure_kind: infra, not its own code)",
            )
        else:
            self._finish(
                JobStatus.FAILED,
                f"FAILED (infra): GPU fault {when} ({detail}); infra retries spent."
                " Next: `air gpus` and `air doctor`",
                failure_kind="infra",
            )

    def _finish(
        self,
        status: JobStatus,
        message: str,
        exit_code: int | None = None,
        sig: str | None = None,
        failure_kind: str | None = None,
    ) -> None:
        if self.spec.get("data"):  # inputs fingerprinted again: did the job's data change?
            from air_skills.tracking.data import exit_note

            if self._warm is not None:  # exit_note may import MLflow: one thread at a time
                self._warm.join(timeout=60)
            message += exit_note(self.home, self.spec["data"], self.row["run_id"])
        message = self._end_run(status, message)
        self._settle(
            self.store.finish,
            self.job_id,
            status,
            message=message,
            exit_code=exit_code,
            signal=sig,
            failure_kind=failure_kind,
        )

    def _end_run(self, status: JobStatus, message: str) -> str:
        """End the MLflow run (with the summary block's values); returns the message to keep."""
        from air_skills.runtime.summary_block import parse_summary, read_tail

        values, bad = parse_summary(read_tail(self.row["log_path"]))
        if bad:
            message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
        run_id = self.row["run_id"]
        if not run_id and not self.spec.get("track", True):
            return message
        if self._warm is not None:
            # Importing MLflow from two threads at once breaks it: let the warm-up finish.
            self._warm.join(timeout=60)
        try:
            from air_skills.tracking.mlflow import MlflowTracker

            tracker = MlflowTracker(self.home)
            if not run_id:
                # Tracking was down at launch: create the run now, when possible.
                run_id, exp_id = tracker.create_run(
                    job_id=self.job_id,
                    name=self.row["name"],
                    experiment=self.spec.get("experiment"),
                    config=self.spec.get("config") or {},
                    tags=self.spec.get("tags") or {},
                )
                self.store.set_tracking(self.job_id, run_id, exp_id)
            tracker.finish_run(run_id, status.value, values)
        except Exception as exc:
            message += f" (MLflow run not ended: {str(exc)[:120]})"
        return message

    def _stop_request(self) -> str | None:
        row = self.store.row(self.job_id)
        return row["stop_request"] if row else None

    def _warm_mlflow(self) -> None:
        # Import MLflow while the job runs, so ending the run at exit takes milliseconds.
        # The attempt tag says which start of the job the run's latest values come from.
        try:
            from air_skills.tracking.mlflow import MlflowTracker

            MlflowTracker(self.home).set_attempt(self.row["run_id"], self.row["attempts"])
        except Exception:
            pass


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _install_wakeup() -> None:
    """Signals wake the watch loop's select at once (their handlers only set flags)."""
    global _WAKE_FD
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _WAKE_FD = read_end


def main(argv: list[str] | None = None) -> None:
    """``JOB_ID [--job-pid PID | --start-error TEXT]``; AIR_HOME names the home."""
    args = list(sys.argv[1:] if argv is None else argv)
    job_id = args.pop(0)
    options = dict(zip(args[::2], args[1::2], strict=True))
    home = Path(os.environ["AIR_HOME"])
    job_pid = options.get("--job-pid")
    _install_wakeup()
    store = Store(home)
    try:
        sup = Supervisor(
            home,
            job_id,
            store,
            job_pid=int(job_pid) if job_pid else None,
            start_error=options.get("--start-error"),
        )
        while True:
            # The next job is one that this process's pass started, or one handed to it while
            # it waits: either way no interpreter boots for it.
            started = sup.run()
            if started is not None:
                sup = Supervisor(home, started.row["job_id"], store, started=started)
                continue
            handed = None if sup.stop_signal.is_set() else _linger(store)
            if handed is None:
                break
            sup = Supervisor(home, handed["job_id"], store, started=Started(handed))
    finally:
        store.close()


def _linger(store: Store, linger_s: float = LINGER_S) -> Any:
    """Wait, as an idle supervisor, for a pass to hand this process a job; its row, or None."""
    if linger_s <= 0 or _WAKE_FD is None:
        return None
    me = os.getpid()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(local.POKE_SIGNAL, lambda *_: None)  # wakes the select below
    try:  # import what the preflight needs now, not while a job waits for it
        provider().faults([])
    except Exception:
        pass
    # Collect now and set what is left aside: a collection of the whole heap would otherwise
    # fall, sooner or later, between a job handed over and its start (milliseconds).
    gc.collect()
    gc.freeze()
    # As many wait as could be handed a job at once; more would only hold memory.
    if not store.add_idle(me, _self_start(), len(local.gpu_indices()) + local.cpu_slots()):
        return None
    deadline = time.monotonic() + linger_s

    def handed() -> Any:
        rows = store.read(
            "SELECT * FROM jobs WHERE status='RUNNING' AND backend='local'"
            " AND supervisor_pid=? AND job_pid IS NULL ORDER BY seq LIMIT 1",
            (me,),
        )
        return rows[0] if rows else None

    while True:
        row = handed()
        if row is not None:
            return row
        left = deadline - time.monotonic()
        if left <= 0 or stop.is_set():
            if store.remove_idle(me):
                return None
            # Off the list already: a pass took this process, its job committed with that.
            return handed()
        select.select([_WAKE_FD], [], [], left)
        try:
            while os.read(_WAKE_FD, 256):
                pass
        except BlockingIOError:
            pass


if __name__ == "__main__":
    main()
