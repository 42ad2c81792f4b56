"""A supervised attempt's end: what its exit, stop request, faults or stall mean, recorded.

Mixed into the Supervisor (supervisor.py): the exit code read (bwrap's, a container engine's),
what the attempt left behind swept, the outcome classified (outcomes.py) and, for a job that
ends, its MLflow run ended and its data re-checked, kept for the supervisor's commit.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

from air_skills.gpu.providers import GpuFault
from air_skills.home import job_dir
from air_skills.runtime.containers import container, engine_exit
from air_skills.runtime.execution import config_args, gang, sandbox, sandbox_ahead
from air_skills.runtime.execution.metric_relay import MetricRelay
from air_skills.runtime.execution.rendezvous import late_outcome
from air_skills.runtime.process import proc
from air_skills.runtime.process.signals import StartedChild
from air_skills.runtime.results.outcomes import AttemptEnd, InfraFailure, Outcome, classify
from air_skills.runtime.runs.job_run import RunWork
from air_skills.runtime.runs.run_end import QueuedEnd, end_run, queue_end
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store
from air_skills.runtime.supervision import disk_cap, gpu_checks, stall, stall_end
from air_skills.runtime.supervision.data_recheck import DataRecheck
from air_skills.tracking import writer as tracking_writer


class AttemptEndMixin:
    """How a Supervisor records its attempt's end (its state is the Supervisor's)."""

    home: Path
    job_id: str
    store: Store
    row: JobRecord
    spec: dict[str, Any]
    gpus: list[int]
    child: subprocess.Popen[bytes] | StartedChild | None
    image: container.ContainerJob | None
    infra_faults: list[GpuFault]
    timed_out: bool
    late: str | None
    stalled: stall.Stall | None
    over_disk: str | None
    stall_watch: stall.StallWatch | None
    _warm: RunWork | None
    _recheck: DataRecheck | None
    _relay: MetricRelay | None
    _outcome: Outcome | None
    _run_end: QueuedEnd | None

    def _record_exit(self, rc: int) -> None:
        assert self.child is not None
        if self.spec.get("sandbox") == "on" and self.image is None:
            rc = sandbox.signal_status(rc)  # bwrap exits 128+N for a command killed by N
        engine_end = None
        if self.image is not None:  # its container goes first; an engine exit is told apart
            engine_end = engine_exit.after_exit(
                self.image, self.job_id, rc, self.spec["command"][0], self.row.log_path
            )
        # Whatever the command left behind in its group goes with it, and (this process being
        # their subreaper) whatever left the group: a `setsid` child must not keep its GPU.
        proc.kill_group(self.child.pid, signal.SIGKILL)
        if proc.is_subreaper():
            # Not the next job's sandbox made ahead (sandbox_ahead.py): this process's own; nor
            # the home's tracking writer when this process started it (the run's end needs it).
            spare = [
                *self.store.supervisor_pids(),
                *sandbox_ahead.pids(),
                *tracking_writer.writer_pids(self.home),
            ]
            proc.sweep_descendants(spare=spare)
        else:  # no subreaper here: the attempt's processes are found by their environment
            proc.sweep_job(self.job_id, self.row.attempts)
        if isinstance(engine_end, Outcome):  # the image lacks the command (126, 127)
            self._record(engine_end)
            return
        row = self.store.row(self.job_id)
        stop = row.stop_request if row else None
        # A stop request outranks the faults (outcomes.py): then no GPU is cordoned either.
        faults = [] if stop in ("cancel", "preempt") else self.infra_faults
        if self.late is not None and stop is None and not faults:  # the gang was stopped
            self._record(late_outcome(self.late, row, self.spec))
            return
        if self.stall_watch is not None:
            self.stall_watch.finish()
        if self.over_disk is not None and stop is None and not faults:  # past its disk cap
            self._record(disk_cap.outcome(self.over_disk, row, self.spec))
            return
        if self.stalled is not None and stop is None and not faults:  # it stopped moving
            jdir = job_dir(self.home, self.job_id)
            ready = self._warm.ready if self._warm is not None else None
            stall_end.attach(self.home, jdir, self.row, self.stalled, ready)
            self._record(stall_end.outcome(self.stalled, row, self.spec))
            return
        # A failure of its own: which rank failed first (a gang), and NCCL's signatures.
        failure = gang.Failure(rc if rc >= 0 else None, -rc if rc < 0 else None)
        if rc != 0 and stop is None and not self.timed_out and not faults:
            failure = gang.read_failure(
                self.row.log_path, rc, gang.is_gang(self.spec, len(self.gpus))
            )
        refused = None
        if failure.exit_code == 2 and stop is None and not self.timed_out:
            refused = config_args.refused(self.spec, self.row.log_path)
        self._end(
            AttemptEnd(
                self.job_id,
                refused_flag=refused,
                config_as=self.spec.get("config_as"),
                exit_code=failure.exit_code,
                signal=proc.signal_name(failure.signal) if failure.signal else None,
                stop_request=stop,
                stop_reason=row.stop_reason if row else None,
                timed_out=self.timed_out,
                timeout_min=self.spec.get("timeout_min"),
                infra=self._cordon(faults, "while running") or engine_end or failure.infra,
                rank=failure.rank,
                rank_error=failure.error_line,
                user_retries=row.user_retries if row else 0,
                max_retries=self.spec.get("max_retries", 0),
                infra_retries=row.infra_retries if row else 0,
            )
        )

    def _infra_failure(self, faults: list[GpuFault], when: str) -> None:
        """The GPU checks found faults before the command started."""
        row = self.store.row(self.job_id)
        infra = self._cordon(faults, when)
        self._end(AttemptEnd(self.job_id, infra=infra, infra_retries=row.infra_retries))

    def _cordon(self, faults: list[GpuFault], when: str) -> InfraFailure | None:
        return gpu_checks.cordon(self.store, self.job_id, faults, when)

    def _end(self, end: AttemptEnd) -> None:
        """Classify the attempt's end (outcomes.py) and keep it for _commit to record."""
        self._record(classify(end))

    def _record(self, outcome: Outcome) -> None:
        """Keep the outcome for _commit; a job that ends gets its data and MLflow notes first."""
        if self._relay is not None:  # the metrics logged last reach the run before it ends
            self._relay.stop()
            self._relay = None
        if outcome.action == "finish":
            assert outcome.status is not None
            self._run_work(self.row)  # a command that never started: its run is completed too
            ready = self._warm.ready if self._warm is not None else None
            self._recheck = DataRecheck(self.home, self.spec, self.row.run_id)
            message = outcome.message + self._recheck.start(ready)
            if outcome.status == "FAILED" and self.spec.get("sandbox") == "on":
                message += sandbox.failure_note(self.row.log_path)
            if outcome.status == "CANCELLED":
                # Through the home's writer the end is queued (durable) and waited for after
                # the record (Supervisor.run): a cancel does not wait for a writer's MLflow
                # import. Other ends keep the run's end (summary values) before the record.
                message, self._run_end = queue_end(
                    self.store, self.row, self.spec, outcome.status, message, ready
                )
            else:
                message = end_run(self.store, self.row, self.spec, outcome.status, message, ready)
            outcome = Outcome(
                "finish",
                message,
                outcome.status,
                outcome.failure_kind,
                exit_code=outcome.exit_code,
                signal=outcome.signal,
            )
        self._outcome = outcome
