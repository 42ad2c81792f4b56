"""The supervisor: one small process per started job, in its own session.

It runs the GPU preflight, starts the command (argv, never a shell) in its own process group
with the job's environment, sends its output to the job's log, enforces the timeout, forwards
cancel and preemption (SIGTERM, then SIGKILL after a grace period), watches GPU health,
records the exit, ends the MLflow run, and runs a scheduling pass so queued jobs start at once.

Run as ``python -m air_skills.runtime.supervision.supervisor JOB_ID`` with AIR_HOME set; with
``--job-pid PID`` when the spawner already started the command (then it is this process's
child: the spawner's child started it and became this process by exec), or
``--start-error TEXT`` when that start failed. When its job ends, the supervisor records
the end and runs a scheduling pass in one transaction, and supervises the first job that
the pass starts itself, so a stream of short jobs costs no interpreter boot per job. With
none to run, it waits up to AIR_SUPERVISOR_LINGER_S as an idle supervisor: a pass that starts
a job hands it over (POKE_SIGNAL), and the job starts without a process being created.
A job runs in the environment it was launched from (its folder's env.json), whoever starts it.
Waiting is runtime/supervision/idle.py's; what an exit means, outcomes.py's, and recording it,
attempt_end.py's; the GPU checks, gpu_checks.py's; the MLflow run (made or completed beside
the job), job_run.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.gpu.providers import GpuFault, provider
from air_skills.home import job_dir, read_launch_env
from air_skills.runtime.containers import container
from air_skills.runtime.execution import sandbox_ahead
from air_skills.runtime.execution.launch_env import command_launch
from air_skills.runtime.execution.metric_relay import MetricRelay, open_relay
from air_skills.runtime.execution.rendezvous import describe_late, watch_joins
from air_skills.runtime.process import proc, signals
from air_skills.runtime.process.signals import POKE_SIGNAL, StartedChild
from air_skills.runtime.results.outcomes import (
    AttemptEnd,
    Outcome,
    start_failed,
)
from air_skills.runtime.runs import job_run, run_end
from air_skills.runtime.runs.job_run import RunWork
from air_skills.runtime.scheduling import passes
from air_skills.runtime.scheduling.spawn import IDLE, prestart_launch
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store
from air_skills.runtime.supervision import disk_cap, gpu_checks, launch_settings, stall
from air_skills.runtime.supervision.attempt_end import AttemptEndMixin
from air_skills.runtime.supervision.data_recheck import DataRecheck
from air_skills.runtime.supervision.idle import load_tracking, wait_for_job

GRACE_S = settings.get("AIR_GRACE_S")
HEALTH_INTERVAL_S = settings.get("AIR_HEALTH_INTERVAL_S")
POLL_S = 0.05  # where the command's exit cannot be waited for (no pidfd): poll this often
# A job that has run this long has had its start: its supervisor makes the next job's
# sandbox now (sandbox_ahead.py), ready for a job its own pass starts when this one ends.
AHEAD_AFTER_RUN_S = 2.0
# POKE_SIGNAL arrived: read the state now. One flag for the process, so that a poke that comes
# while one job hands over to the next is not lost (a stale one costs one read).
_POKED = signals.SignalFlag()
_CHILD_EXITED = signals.SignalFlag()  # SIGCHLD: a child ended (the job, or an adopted orphan)
# The MLflow work of this process's jobs: joined before it exits (a spare run being made).
_RUN_WORK: list[RunWork] = []


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

    row: JobRecord
    child: subprocess.Popen[bytes] | None = None
    error: str | None = None


class Supervisor(AttemptEndMixin):
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
        self.stop_signal = signals.SignalFlag()  # SIGTERM/SIGINT (set in a handler: no lock)
        self._outcome: Outcome | None = None  # the attempt's end, recorded by _commit
        self._run_end: run_end.QueuedEnd | None = None  # its run's end, waited for after it
        self.child: subprocess.Popen[bytes] | StartedChild | None = None
        self._started = started  # given to this process: its row (and command, if started)
        if started is not None:
            self.child = started.child
            self.job_pid = started.child.pid if started.child else None
            self.start_error = started.error
        self.infra_faults: list[GpuFault] = []
        self.image: container.ContainerJob | None = None  # a job run by a container engine
        self.timed_out = False
        self.late: str | None = None  # a gang rendezvous timed out (execution/rendezvous.py)
        self.stalled: stall.Stall | None = None  # the job stopped moving (supervision/stall.py)
        self.stall_watch: stall.StallWatch | None = None
        self.disk: disk_cap.DiskWatch | None = None  # the job's disk cap (disk_cap.py)
        self.over_disk: str | None = None  # it wrote past its cap
        self._warm: RunWork | None = None
        self._recheck: DataRecheck | None = None
        self._relay: MetricRelay | None = None  # a sandboxed job's metrics (metric_relay.py)

    # --- the whole life of one attempt ----------------------------------------------------

    def run(self) -> Started | None:
        """Supervise the attempt; returns a job that this process is to supervise next."""
        launch_settings.adopt(self.home, self.job_id)  # its launch's settings, not this process's
        row = self._started.row if self._started else self.store.row(self.job_id)
        me = os.getpid()
        if row is None or row.status != "RUNNING" or row.supervisor_pid not in (None, me):
            if self.job_pid:  # started for a record that is not ours: it must not run alone
                proc.kill_group(self.job_pid)
            return None
        if row.supervisor_pid is None:
            self.store.set_supervisor(self.job_id, me, proc.own_start())
        signal.signal(signal.SIGTERM, lambda *_: self.stop_signal.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_signal.set())
        signal.signal(POKE_SIGNAL, lambda *_: _POKED.set())
        self.spec: dict[str, Any] = row.spec_dict()
        self.image = (
            container.load(job_dir(self.home, self.job_id)) if self.spec.get("image") else None
        )
        self.gpus: list[int] = row.gpu_list()
        self.row = row
        self._attempt(row)
        started = self._commit()
        if self._run_end is not None:  # queued before the record; its reply is waited for now
            note = run_end.finish_end(self.store, self._run_end)
            if note:
                self.store.append_message(self.job_id, note)
        if self._recheck is not None:
            self._recheck.finish(self.store, self.job_id)
        return started

    def _run_work(self, row: JobRecord) -> None:
        """Start the job's MLflow work beside it (runtime/runs/job_run.py), once its command has
        started: importing MLflow would hold the GIL while the command is being started."""
        if self._warm is not None or not row.run_id:
            return
        self._warm = RunWork(self.home, row).start()
        _RUN_WORK[:] = [w for w in _RUN_WORK if w.alive()] + [self._warm]
        # A sandboxed job logs to a store of its own: its metrics are forwarded to its run.
        jdir = job_dir(self.home, self.job_id)
        uri = job_run.job_uri(self.home, jdir)
        self._relay = open_relay(jdir, row.run_id, row.experiment_id, uri)
        if self._relay is not None:
            self._relay.start(self._warm.ready)

    def _make_pending_run(self, row: JobRecord) -> JobRecord:
        """A job launched without its run (no spare, sqlite): make it before the command
        starts, so the job knows its run id from its first instruction. That may wait for a
        writer's MLflow import: the record returned is read after it (a cancel meanwhile)."""
        if not job_run.is_pending(self.home, row):
            return row
        self.row = row = job_run.make_pending_run(self.store, row)
        return row

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

    def _start_next(self, row: JobRecord) -> Started:
        """Start the command of a job that this process's pass gave to it, and record it.

        When the quick preflight finds anything (or a deep one is asked for), the command
        waits for _attempt, which runs the full preflight first.
        """
        try:
            launch_settings.adopt(self.home, row.job_id)  # before its preflight (38.7)
            row = job_run.make_run_in_sql(self.store, row)  # a pending run, in milliseconds
            launch = prestart_launch(self.home, row)
            if launch is None:
                return Started(row)
            child = launch.popen()
        except Exception as exc:  # recorded by _attempt_started, as when it starts it
            return Started(row, error=f"{type(exc).__name__}:{exc}")
        _record_command(self.store, row.job_id, child.pid, row.gpu_list())
        return Started(row, child)

    def _attempt(self, row: JobRecord) -> None:
        if self.job_pid is not None or self.start_error is not None:
            self._attempt_started(row)
            return
        if row.stop_request == "cancel":  # the row was read just now
            self._end(AttemptEnd(self.job_id, stop_request="cancel", stop_reason=row.stop_reason))
            return
        faults, check = gpu_checks.preflight(self.store, row, self.spec, self.gpus)
        if faults:
            self._infra_failure(faults, check)
            return
        row = self._make_pending_run(row)
        if row.stop_request == "cancel":  # cancelled while its run was being made
            self._end(AttemptEnd(self.job_id, stop_request="cancel", stop_reason=row.stop_reason))
            return
        try:
            self.child = self._start()
        except OSError as exc:
            self._start_failed(type(exc).__name__, str(exc))
            return
        _record_command(self.store, self.job_id, self.child.pid, self.gpus)
        self._run_work(self.row)
        rc = self._watch()
        self._record_exit(rc)

    def _attempt_started(self, row: JobRecord) -> None:
        """The spawner ran the quick preflight and started the command before we booted."""
        if self.start_error is not None:
            kind, _, text = self.start_error.partition(":")
            self._start_failed(kind, text)
            return
        assert self.job_pid is not None
        if self.child is None:
            self.child = StartedChild(self.job_pid)
        if self._started is None and row.job_pid != self.job_pid:  # not on record yet
            self.store.set_running(
                self.job_id,
                self.job_pid,
                proc.start_time(self.job_pid) or "",
                passes.running_message(self.gpus),
            )
        self._run_work(self.row)
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
        self.joins = watch_joins(job_dir(self.home, self.job_id), self.row, self.spec, self.gpus)
        self.stall_watch = stall.watch(
            self.home, job_dir(self.home, self.job_id), self.row, self.spec, self.gpus
        )
        jdir = job_dir(self.home, self.job_id)
        self.disk = disk_cap.watch(jdir, self.spec, read_launch_env(jdir))
        self.over_disk = None
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
        started = time.monotonic()
        while True:
            rc = child.poll()
            if rc is not None:
                return rc
            now = time.monotonic()
            if _CHILD_EXITED.is_set():  # an adopted orphan ended: reap it (not the job)
                _CHILD_EXITED.clear()
                rc = child.poll()  # most often it is the job itself that ended
                if rc is not None:
                    return rc
                proc.reap_children(keep=(child.pid,))
            if _POKED.is_set():  # a stop request was recorded: read it now
                _POKED.clear()
                next_db_check = now
            if self.stop_signal.is_set() or (now >= next_db_check and self._stop_request()):
                return self._terminate()
            if now >= next_db_check:
                next_db_check = now + 1.0
                if now - started >= AHEAD_AFTER_RUN_S:  # the next job's sandbox, if none
                    sandbox_ahead.prepare()
                late = self.joins.check() if self.joins is not None else None
                if late is not None:
                    self.late = describe_late(late, self.row.log_path)
                    return self._terminate()
                if self.stall_watch is not None:
                    self.stalled = stall.tick(
                        self.stall_watch, self.store, self.row, self.spec, now, self._pids
                    )
                    if self.stalled is not None:
                        return self._terminate()
                if self.disk is not None:
                    self.over_disk = self.disk.tick(now)
                    if self.over_disk is not None:
                        return self._terminate()
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
            if not self.stop_signal.is_set():
                time.sleep(min(timeout_s, POLL_S))  # short: a stop is seen within POLL_S
            return
        signals.wait_readable([pidfd], timeout_s)

    def _pids(self) -> list[int]:
        """The job's processes: its command and every descendant (a gang's ranks)."""
        assert self.child is not None
        return [self.child.pid, *proc.descendants(self.child.pid)[0]]

    def _terminate(self) -> int:
        child = self.child
        assert child is not None
        if self.image is not None:  # the engine stops the container (TERM, grace, KILL)
            container.stop(self.image.engine, self.job_id, GRACE_S, self.image.engine_env)
        proc.kill_group(child.pid, signal.SIGTERM)
        try:
            return child.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill_group(child.pid, signal.SIGKILL)
            return child.wait()

    def _stop_request(self) -> str | None:
        row = self.store.row(self.job_id)
        return row.stop_request if row else None


def main(argv: list[str] | None = None) -> None:
    """``JOB_ID [--job-pid PID | --start-error TEXT]``, or ``--idle`` (no job yet: wait for
    a pass to hand one over); AIR_HOME names the home."""
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
        if job_id == IDLE:  # started ahead of any job (spawn.idle_ahead): wait for one
            load_tracking(home)
            first = wait_for_job(store)
            if first is None:
                return
            sup = Supervisor(home, first.job_id, store, started=Started(first))
        else:
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
                sup = Supervisor(home, started.row.job_id, store, started=started)
                continue
            given = None if sup.stop_signal.is_set() else wait_for_job(store, after=_RUN_WORK)
            if given is None:
                break
            sup = Supervisor(home, given.job_id, store, started=Started(given))
    finally:
        sandbox_ahead.discard()
        for work in _RUN_WORK:  # a spare run half made would be lost to the pool
            work.join(30)
        store.close()


if __name__ == "__main__":
    main()
