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
The waiting is runtime/idle.py's; what an exit means for the job is runtime/outcomes.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.gpu.providers import GpuFault, provider
from air_skills.home import job_dir
from air_skills.runtime import container, gang, nccl, passes, proc, signals
from air_skills.runtime.idle import wait_for_job
from air_skills.runtime.launch_env import command_launch
from air_skills.runtime.outcomes import AttemptEnd, InfraFailure, Outcome, classify, start_failed
from air_skills.runtime.run_end import end_run, warm_mlflow
from air_skills.runtime.signals import POKE_SIGNAL, StartedChild
from air_skills.runtime.spawn import prestart_launch
from air_skills.runtime.store import Store

GRACE_S = settings.get("AIR_GRACE_S")
HEALTH_INTERVAL_S = settings.get("AIR_HEALTH_INTERVAL_S")
# The end-of-job data re-check may take this long before the job's end is recorded without
# it (the note follows): a replaced 20 GB input must not hold the job's GPUs while it is read.
RECHECK_INLINE_S = 2.0
POLL_S = 0.05  # where the command's exit cannot be waited for (no pidfd): poll this often
# POKE_SIGNAL arrived: read the state now. One flag for the process, so that a poke that comes
# while one job hands over to the next is not lost (a stale one costs one read).
_POKED = threading.Event()
_CHILD_EXITED = threading.Event()  # SIGCHLD: a child ended (the job, or an adopted orphan)


# A command that ends within this time of its start is not put on record as running (its end
# is, a moment later): a transaction less per short job. Anything longer is recorded then, so
# that were its supervisor lost, reconcile finds and stops it.
RECORD_AFTER_S = 0.002


def _record_command(store: Store, job_id: str, pid: int, gpus: list[int]) -> None:
    """Record a started command's pid and start time, unless it has already ended."""
    if not signals.wait_exit(pid, RECORD_AFTER_S):
        store.set_running(job_id, pid, proc.start_time(pid) or "", passes.running_message(gpus))


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
        self._outcome: Outcome | None = None  # the attempt's end, recorded by _commit
        self.child: subprocess.Popen[bytes] | StartedChild | None = None
        self._started = started  # given to this process: its row (and command, if started)
        if started is not None:
            self.child = started.child
            self.job_pid = started.child.pid if started.child else None
            self.start_error = started.error
        self.infra_faults: list[GpuFault] = []
        self.image: container.ContainerJob | None = None  # a job run by a container engine
        self.timed_out = False
        self._warm: threading.Thread | None = None
        self._recheck: threading.Thread | None = None  # a data re-check still running
        self._recheck_note: list[str] = []

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
            self.store.set_supervisor(self.job_id, me, proc.own_start())
        signal.signal(signal.SIGTERM, lambda *_: self.stop_signal.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_signal.set())
        signal.signal(POKE_SIGNAL, lambda *_: _POKED.set())
        self.spec: dict[str, Any] = json.loads(row["spec"])
        self.image = (
            container.load(job_dir(self.home, self.job_id)) if self.spec.get("image") else None
        )
        self.gpus: list[int] = json.loads(row["gpus"])
        self.row = row
        if row["run_id"]:
            self._warm = threading.Thread(target=warm_mlflow, args=(self.home, row), daemon=True)
            self._warm.start()
        self._attempt(row)
        started = self._commit()
        self._recheck_data()
        return started

    def _start_recheck(self) -> str:
        """Fingerprint the data inputs again (did they change while the job ran?); the note
        for the job's message if that takes under RECHECK_INLINE_S, else "" and the note is
        added once the job's end is recorded and its GPUs are free (_recheck_data)."""
        if not self.spec.get("data"):
            return ""
        from air_skills.tracking.data import exit_note

        if self._warm is not None:  # exit_note may import MLflow: one thread at a time
            self._warm.join(timeout=60)

        def recheck() -> None:
            self._recheck_note.append(exit_note(self.home, self.spec["data"], self.row["run_id"]))

        thread = threading.Thread(target=recheck, daemon=True)
        thread.start()
        thread.join(RECHECK_INLINE_S)
        if thread.is_alive():  # a large or replaced input: the GPUs are not held for it
            self._recheck = thread
            return ""
        return "".join(self._recheck_note)

    def _recheck_data(self) -> None:
        """After the job's end is recorded: add the slow re-check's note to its message."""
        if self._recheck is None:
            return
        self._recheck.join()
        note = "".join(self._recheck_note)
        if note:
            self.store.append_message(self.job_id, note)

    def _commit(self) -> Started | None:
        """Record the attempt's end and run a scheduling pass, in one transaction.

        The jobs this attempt made room for start now, not at the next client call, and no
        other pass can see the GPUs free in between. The first job started is for this
        process to supervise next (unless it was asked to stop): its command starts here,
        once the transaction is committed (a start inside it would hold every other writer).
        """
        gpus = passes.schedulable_gpus(self.store)
        caller = None if self.stop_signal.is_set() else (os.getpid(), proc.own_start())
        try:
            with self.store.tx() as c:
                if self._outcome is not None:
                    self.store.record_outcome(self.job_id, self._outcome, c=c)
                result = passes.run_pass(self.store, c, gpus, caller)
        except Exception:
            if self._outcome is not None:  # a failing pass must not lose the job's end
                self.store.record_outcome(self.job_id, self._outcome)
            raise
        if result.caller_job is None:
            passes.act_on_pass(self.store, result)
            return None
        # Ours first: this process is the quickest start; the others' starts follow.
        started = self._start_next(result.rows[result.caller_job])
        passes.act_on_pass(self.store, result)
        return started

    def _start_next(self, row: Any) -> Started:
        """Start the command of a job that this process's pass gave to it, and record it.

        When the quick preflight finds anything (or a deep one is asked for), the command
        waits for _attempt, which runs the full preflight first.
        """
        try:
            launch = prestart_launch(self.home, row)
            if launch is None:
                return Started(row)
            child = launch.popen()
        except Exception as exc:  # recorded by _attempt_started, as when it starts it
            return Started(row, error=f"{type(exc).__name__}:{exc}")
        _record_command(self.store, row["job_id"], child.pid, json.loads(row["gpus"]))
        return Started(row, child)

    def _attempt(self, row: Any) -> None:
        if self.job_pid is not None or self.start_error is not None:
            self._attempt_started(row)
            return
        if row["stop_request"] == "cancel":  # the row was read just now
            self._end(
                AttemptEnd(self.job_id, stop_request="cancel", stop_reason=row["stop_reason"])
            )
            return
        checked = provider().faults(self.gpus) if self.gpus else []
        for note in dict.fromkeys(f.detail for f in checked if f.index < 0):
            self.store.event(self.job_id, "health-warning", f"GPU check problem: {note}")
        faults = [f for f in checked if f.critical and f.index >= 0]
        if faults:
            self._infra_failure(faults, "preflight")
            return
        if self.gpus and (self.spec.get("deep_preflight") or self._after_nccl(row)):
            from air_skills.gpu.deep_check import deep_preflight_faults

            faults = deep_preflight_faults(self.gpus, self.row["log_path"])
            if faults:
                self._infra_failure(faults, "deep preflight")
                return
        try:
            self.child = self._start()
        except OSError as exc:
            self._start_failed(type(exc).__name__, str(exc))
            return
        _record_command(self.store, self.job_id, self.child.pid, self.gpus)
        rc = self._watch()
        self._record_exit(rc)

    def _after_nccl(self, row: Any) -> bool:
        """Whether this attempt retries an NCCL failure: its GPUs get the deep check first."""
        return row["failure_kind"] == "infra" and nccl.retry_after_nccl(
            self.store.events(self.job_id)
        )

    def _attempt_started(self, row: Any) -> None:
        """The spawner ran the quick preflight and started the command before we booted."""
        if self.start_error is not None:
            kind, _, text = self.start_error.partition(":")
            self._start_failed(kind, text)
            return
        assert self.job_pid is not None
        if self.child is None:
            self.child = StartedChild(self.job_pid)
        if self._started is None and row["job_pid"] != self.job_pid:  # not on record yet
            self.store.set_running(
                self.job_id,
                self.job_pid,
                proc.start_time(self.job_pid) or "",
                passes.running_message(self.gpus),
            )
        rc = self._watch()
        self._record_exit(rc)

    def _start_failed(self, kind: str, text: str) -> None:
        """The command could not start (an OSError's class name and text): the user's to fix."""
        self._record(start_failed(kind, text, self.spec["command"][0]))

    def _start(self) -> subprocess.Popen[bytes]:
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
        pidfd = signals.pidfd(child.pid)
        try:
            return self._watch_loop(child, deadline, next_health, next_db_check, pidfd)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _watch_loop(
        self,
        child: subprocess.Popen[bytes] | StartedChild,
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
            if _CHILD_EXITED.is_set():  # an adopted orphan ended: reap it (not the job)
                _CHILD_EXITED.clear()
                proc.reap_children(keep=(child.pid,))
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
        if pidfd is None or not signals.wakeup_installed():
            self.stop_signal.wait(min(timeout_s, POLL_S))
            return
        signals.wait_readable([pidfd], timeout_s)

    def _terminate(self) -> int:
        child = self.child
        assert child is not None
        if self.image is not None:  # the engine stops the container (TERM, grace, KILL)
            container.stop(self.image.engine, self.job_id, GRACE_S)
        proc.kill_group(child.pid, signal.SIGTERM)
        try:
            return child.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill_group(child.pid, signal.SIGKILL)
            return child.wait()

    # --- outcomes ----------------------------------------------------------------------------

    def _record_exit(self, rc: int) -> None:
        assert self.child is not None
        engine_end = None
        if self.image is not None:  # its container goes first; an engine exit is told apart
            engine_end = container.after_exit(self.image, self.job_id, rc, self.spec["command"][0])
        # Whatever the command left behind in its group goes with it, and (this process being
        # their subreaper) whatever left the group: a `setsid` child must not keep its GPU.
        proc.kill_group(self.child.pid, signal.SIGKILL)
        if proc.is_subreaper():
            proc.sweep_descendants(spare=self.store.supervisor_pids())
        if isinstance(engine_end, Outcome):  # the image lacks the command (126, 127)
            self._record(engine_end)
            return
        row = self.store.row(self.job_id)
        stop = row["stop_request"] if row else None
        # A stop request outranks the faults (outcomes.py): then no GPU is cordoned either.
        faults = [] if stop in ("cancel", "preempt") else self.infra_faults
        # A failure of its own: which rank failed first (a gang), and NCCL's signatures.
        failure = gang.Failure(rc if rc >= 0 else None, -rc if rc < 0 else None)
        if rc != 0 and stop is None and not self.timed_out and not faults:
            failure = gang.read_failure(
                self.row["log_path"], rc, gang.is_gang(self.spec, len(self.gpus))
            )
        self._end(
            AttemptEnd(
                self.job_id,
                exit_code=failure.exit_code,
                signal=proc.signal_name(failure.signal) if failure.signal else None,
                stop_request=stop,
                stop_reason=row["stop_reason"] if row else None,
                timed_out=self.timed_out,
                timeout_min=self.spec.get("timeout_min"),
                infra=self._cordon(faults, "while running") or engine_end or failure.infra,
                rank=failure.rank,
                rank_error=failure.error_line,
                user_retries=row["user_retries"] if row else 0,
                max_retries=self.spec.get("max_retries", 0),
                infra_retries=row["infra_retries"] if row else 0,
            )
        )

    def _infra_failure(self, faults: list[GpuFault], when: str) -> None:
        """The GPU checks found faults before the command started."""
        row = self.store.row(self.job_id)
        infra = self._cordon(faults, when)
        self._end(AttemptEnd(self.job_id, infra=infra, infra_retries=row["infra_retries"]))

    def _cordon(self, faults: list[GpuFault], when: str) -> InfraFailure | None:
        """Cordon the faulty GPUs; the infra failure that they make, or None without faults."""
        if not faults:
            return None
        detail = "; ".join(f.describe() for f in faults)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for idx in sorted({f.index for f in faults}):
            reason = "; ".join(f"{f.kind}: {f.detail}" for f in faults if f.index == idx)
            self.store.cordon(
                idx, f"{reason} ({when}, job {self.job_id}, {stamp})", health="unhealthy"
            )
        return InfraFailure(f"GPU fault {when} ({detail})", "gpu")

    def _end(self, end: AttemptEnd) -> None:
        """Classify the attempt's end (outcomes.py) and keep it for _commit to record."""
        self._record(classify(end))

    def _record(self, outcome: Outcome) -> None:
        """Keep the outcome for _commit; a job that ends gets its data and MLflow notes first."""
        if outcome.action == "finish":
            assert outcome.status is not None
            message = outcome.message + self._start_recheck()
            message = end_run(self.store, self.row, self.spec, outcome.status, message, self._warm)
            outcome = Outcome(
                "finish",
                message,
                outcome.status,
                outcome.failure_kind,
                exit_code=outcome.exit_code,
                signal=outcome.signal,
            )
        self._outcome = outcome

    def _stop_request(self) -> str | None:
        row = self.store.row(self.job_id)
        return row["stop_request"] if row else None


def main(argv: list[str] | None = None) -> None:
    """``JOB_ID [--job-pid PID | --start-error TEXT]``; AIR_HOME names the home."""
    args = list(sys.argv[1:] if argv is None else argv)
    job_id = args.pop(0)
    options = dict(zip(args[::2], args[1::2], strict=True))
    home = Path(settings.get("AIR_HOME"))  # set by the spawner
    job_pid = options.get("--job-pid")
    signals.install_wakeup()
    if proc.become_subreaper():  # the spawner set it already (kept across exec): note it
        signal.signal(signal.SIGCHLD, lambda *_: _CHILD_EXITED.set())
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
            given = None if sup.stop_signal.is_set() else wait_for_job(store)
            if given is None:
                break
            sup = Supervisor(home, given["job_id"], store, started=Started(given))
    finally:
        store.close()


if __name__ == "__main__":
    main()
