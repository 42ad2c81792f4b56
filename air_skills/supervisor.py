"""The supervisor: one small process per started job, in its own session.

It runs the GPU preflight, starts the command (argv, never a shell) in its own process group
with the job's environment, sends its output to the job's log, enforces the timeout, forwards
cancel and preemption (SIGTERM, then SIGKILL after a grace period), watches GPU health,
records the exit, ends the MLflow run, and runs a scheduling pass so queued jobs start at once.

Run as ``python -m air_skills.supervisor JOB_ID`` with AIR_HOME set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from air_skills import proc
from air_skills.backends.local import MAX_INFRA_RETRIES, schedule_pass, thread_caps
from air_skills.gpus import GpuFault, provider
from air_skills.status import JobStatus
from air_skills.store import Store

GRACE_S = float(os.environ.get("AIR_GRACE_S", "10"))
HEALTH_INTERVAL_S = float(os.environ.get("AIR_HEALTH_INTERVAL_S", "5"))
POLL_S = 0.05


class Supervisor:
    def __init__(self, home: Path, job_id: str) -> None:
        self.home = home
        self.job_id = job_id
        self.store = Store(home)
        self.stop_signal = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.infra_faults: list[GpuFault] = []
        self.timed_out = False
        self._mlflow_ready = threading.Event()

    # --- the whole life of one attempt ----------------------------------------------------

    def run(self) -> None:
        row = self.store.row(self.job_id)
        if row is None or row["status"] != "RUNNING" or row["supervisor_pid"]:
            return
        self.store.set_supervisor(self.job_id, os.getpid(), proc.start_time(os.getpid()) or "")
        signal.signal(signal.SIGTERM, lambda *_: self.stop_signal.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_signal.set())
        self.spec: dict[str, Any] = json.loads(row["spec"])
        self.gpus: list[int] = json.loads(row["gpus"])
        self.row = row
        if row["run_id"]:
            threading.Thread(target=self._warm_mlflow, daemon=True).start()
        try:
            self._attempt(row)
        finally:
            self.store.close()
        # The jobs this attempt made room for start now, not at the next client call.
        schedule_pass(Store(self.home))

    def _attempt(self, row: Any) -> None:
        if self._stop_request() == "cancel":
            self._finish(JobStatus.CANCELLED, f"CANCELLED: {row['stop_reason']}")
            return
        faults = [f for f in provider().faults(self.gpus) if f.critical and f.index >= 0]
        if faults:
            self._infra_failure(faults, "preflight")
            return
        job_dir = self.home / "jobs" / self.job_id
        try:
            self.child = self._start(job_dir)
        except FileNotFoundError:
            self._finish(
                JobStatus.FAILED,
                f"FAILED: command not found: {self.spec['command'][0]!r}."
                " Next: check the program name and PATH, then relaunch",
                exit_code=127,
                failure_kind="user",
            )
            return
        except PermissionError:
            self._finish(
                JobStatus.FAILED,
                f"FAILED: permission denied running {self.spec['command'][0]!r}."
                " Next: make it executable or run it through its interpreter",
                exit_code=126,
                failure_kind="user",
            )
            return
        except NotADirectoryError as exc:
            self._finish(
                JobStatus.FAILED,
                f"FAILED: {exc}. Next: fix the job's workdir",
                exit_code=126,
                failure_kind="user",
            )
            return
        pid = self.child.pid
        self.store.set_running(
            self.job_id,
            pid,
            proc.start_time(pid) or "",
            f"RUNNING on GPUs {self.gpus}" if self.gpus else "RUNNING on CPU",
        )
        rc = self._watch()
        self._record_exit(rc)

    def _start(self, job_dir: Path) -> subprocess.Popen[bytes]:
        spec = self.spec
        ckpt = job_dir / "checkpoints"
        ckpt.mkdir(exist_ok=True)
        env = dict(os.environ)
        for key in ("AIR_GRACE_S", "AIR_HEALTH_INTERVAL_S"):
            env.pop(key, None)
        env.update(thread_caps(self.row["cpus"] or 1))
        env.update(
            {
                "AIR_JOB_ID": self.job_id,
                "AIR_CONFIG_FILE": os.fspath(job_dir / "config.json"),
                "AIR_CHECKPOINT_DIR": os.fspath(ckpt),
                "AIR_DATA_DIR": os.fspath(job_dir / "data"),
                "AIR_ATTEMPT": str(self.row["attempts"]),
                "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.gpus),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.row["run_id"]:
            from air_skills.tracking import tracking_uri

            env["MLFLOW_TRACKING_URI"] = tracking_uri(self.home)
            env["MLFLOW_RUN_ID"] = self.row["run_id"]
            env["MLFLOW_EXPERIMENT_ID"] = self.row["experiment_id"] or ""
        env.update(spec.get("env") or {})
        log = open(self.row["log_path"], "ab")
        try:
            if self.row["attempts"] > 1:
                log.write(
                    f"[air] attempt {self.row['attempts']} on GPUs {self.gpus}\n".encode()
                )
                log.flush()
            return subprocess.Popen(
                spec["command"],
                cwd=spec.get("workdir") or None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                close_fds=True,
            )
        finally:
            log.close()

    def _watch(self) -> int:
        child = self.child
        assert child is not None
        timeout_min = self.spec.get("timeout_min")
        deadline = time.monotonic() + timeout_min * 60 if timeout_min else None
        next_health = time.monotonic() + HEALTH_INTERVAL_S
        next_db_check = time.monotonic() + 1.0
        while True:
            rc = child.poll()
            if rc is not None:
                return rc
            now = time.monotonic()
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
            self.stop_signal.wait(POLL_S)

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
            self.store.requeue(
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
                self.store.requeue(
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
        for idx in sorted({f.index for f in faults}):
            reason = "; ".join(f"{f.kind}: {f.detail}" for f in faults if f.index == idx)
            self.store.cordon(idx, f"{when}: {reason}", health="unhealthy")
        row = self.store.row(self.job_id)
        if row["infra_retries"] < MAX_INFRA_RETRIES:
            self.store.requeue(
                self.job_id,
                kind="infra",
                message=f"QUEUED: GPU fault {when} ({detail}); GPU cordoned, the job restarts on"
                " healthy GPUs (infra failure, not its own)",
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
        message = self._end_run(status, message)
        self.store.finish(
            self.job_id,
            status,
            message=message,
            exit_code=exit_code,
            signal=sig,
            failure_kind=failure_kind,
        )

    def _end_run(self, status: JobStatus, message: str) -> str:
        """End the MLflow run (with the summary block's values); returns the message to keep."""
        from air_skills.summary import parse_summary, read_tail

        values, bad = parse_summary(read_tail(self.row["log_path"]))
        if bad:
            message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
        run_id = self.row["run_id"]
        if not run_id and not self.spec.get("track", True):
            return message
        try:
            from air_skills.tracking import MlflowTracker

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
            from air_skills.tracking import MlflowTracker

            MlflowTracker(self.home).set_attempt(self.row["run_id"], self.row["attempts"])
        except Exception:
            pass


def main() -> None:
    job_id = sys.argv[1]
    home = Path(os.environ["AIR_HOME"])
    Supervisor(home, job_id).run()


if __name__ == "__main__":
    main()
