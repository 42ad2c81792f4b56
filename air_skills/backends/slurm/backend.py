"""The Slurm backend: the same job specs on a Slurm cluster, through its commands.

A job with ``backend: slurm`` is prepared as every job is (folder, code snapshot, MLflow run),
recorded, then submitted with ``sbatch``; its record holds ``backend_ref = "slurm:<id>"`` and
is reconciled against ``squeue`` / ``scontrol`` on each client call (see ``reconcile.py``).
The job folder must be readable by the nodes: on a single-node cluster (this host) it is; on
a larger one AIR_HOME must live under ``AIR_SLURM_SHARED_DIR``. ``docs/slurm.md`` says more.
"""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from air_skills import settings
from air_skills.backends.base import already_finished
from air_skills.backends.info import row_to_info
from air_skills.backends.sandboxing import REASON_TAG, resolve_sandbox
from air_skills.backends.settle import finish
from air_skills.backends.slurm import commands, staging, steps
from air_skills.backends.slurm import reconcile as reconciling
from air_skills.backends.slurm.submit import NICE, sbatch_options, slurm_id_of, submit
from air_skills.errors import AirError, BackendUnavailable, InvalidSpec
from air_skills.runtime.code.job_code import plan_code
from air_skills.runtime.launch.duplicates import precheck
from air_skills.runtime.launch.launch_run import claim_run, give_back_run
from air_skills.runtime.launch.prepare import (
    LaunchContext,
    find_by_idempotency_key,
    job_name,
    launcher_tag,
    prepare_job,
    recording,
)
from air_skills.runtime.runs import job_run
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus

if TYPE_CHECKING:  # pydantic's: a launch from a shell queues a SpecView without it
    from air_skills.models import JobInfo, JobSpec

STOP_WAIT_S = 15.0


def _gang_sandbox(spec: JobSpec) -> JobSpec:
    """A gang of several nodes runs without a sandbox: its ranks reach each other over the
    nodes' network, which a sandbox's network namespace cuts. Said on the job; `on` refused."""
    if spec.sandbox == "on":
        raise InvalidSpec(
            "a gang of several nodes on Slurm cannot run sandboxed (its ranks reach each other"
            " over the nodes' network, which a sandbox cuts): nothing launched",
            hint="run it on one node (nodes: 1, procs: GPUs), or launch it as the pool's owner"
            " (an identity needs --allow-unsandboxed) without sandbox: on",
        )
    why = "a gang of several nodes needs the nodes' network"
    return spec.model_copy(update={"sandbox": "off", "tags": {**spec.tags, REASON_TAG: why}})


class SlurmBackend:
    """Submit, reconcile, cancel and read logs of jobs on Slurm, over one AIR_HOME."""

    def __init__(self, runtime: LaunchContext) -> None:
        self.runtime = runtime

    # --- launching --------------------------------------------------------------------------

    def launch(self, spec: JobSpec, dry_run: bool = False) -> JobInfo:
        if not dry_run:
            return row_to_info(self.queue(spec))
        from air_skills.models import JobInfo

        spec = self._checked(spec)
        opts = " ".join(sbatch_options("job-…", spec, self.runtime.home / "jobs" / "JOB"))
        return JobInfo(
            job_id="dry-run",
            name=job_name(spec.name, spec.command),
            status=JobStatus.QUEUED,
            message=f"DRY RUN: would submit {spec.command!r} from {spec.workdir} to Slurm"
            f" with `sbatch {opts}`; nothing was launched",
            priority=spec.priority,
            created_at=datetime.now(UTC),
            backend="slurm",
            project=spec.project or "default",
        )

    def _checked(self, spec: JobSpec) -> JobSpec:
        """The spec refused, or with its sandbox decided: the node runs it under the same
        sandbox as a local job (bwrap: runner.py); `on` where none can be made is refused."""
        self._check(spec)
        return _gang_sandbox(spec) if spec.nodes > 1 else resolve_sandbox(spec, self.runtime.home)

    def queue(self, spec: JobSpec) -> JobRecord:
        """``launch`` without its reply model: recorded, then submitted with ``sbatch``; the
        job's record (a JobSpec or a SpecView of models/spec_view.py: `air launch` from a shell).

        A launcher that keeps MLflow out (the CLI) never waits for MLflow's import: a spare
        run is claimed in the queue transaction and completed after ``sbatch`` by the home's
        tracking writer (queued requests, not waited for: the job is on its way); with no spare,
        the writer makes the run before ``sbatch`` (the job has its run id from its first
        instruction). A launcher killed in between leaves the plan, which the job's end applies
        (backends/settle.py)."""
        rt, store = self.runtime, self.runtime.store
        spec = self._checked(spec)
        existing = find_by_idempotency_key(
            store, spec.idempotency_key, spec.model_dump(mode="json")
        )
        if existing is not None:
            return existing
        code = plan_code(rt.home, spec.workdir, spec.patch) if spec.code == "snapshot" else None
        precheck(store, spec, code.snapshot.digest if code else None)  # a duplicate: nothing made
        job = prepare_job(
            rt,
            name=job_name(spec.name, spec.command),
            config=spec.config,
            data=spec.data,
            track=spec.track,
            experiment=spec.experiment,
            tags={**spec.tags, "air.backend": "slurm", **launcher_tag(spec)},
            code=code,
            run_later=True,  # a spare claimed below, or made before sbatch: runs/job_run.py
        )
        (job.jdir / "output.log").touch()
        with recording(rt, job) as c:
            claim_run(rt, c, job)  # a spare run, pure SQLite: no MLflow here
            got, created = store.queue(
                spec.model_dump(mode="json"),
                job.job_id,
                str(job.log_path),
                job.name,
                job.run_id,
                job.experiment_id,
                "QUEUED: submitting to Slurm",
                c=c,
                project=spec.resolved_project(),
                jdir=job.jdir,
                code_digest=job.code["digest"] if job.code else None,
            )
            if created and job.code is not None:
                store.set_code(c, job.job_id, job.code)
            if not created:
                give_back_run(rt, c, job)
        if not created:
            return _reread(store, got)
        row = _reread(store, job.job_id)
        if job_run.is_pending(rt.home, row):  # no spare: made now (the home's writer, if on)
            row = job_run.make_pending_run(store, row)
        try:
            submit(rt, row, spec)
        except InvalidSpec as exc:  # sbatch refused it: the record says why, and so do we
            finish(rt, row, JobStatus.FAILED, f"FAILED: {exc.message}", failure_kind="user")
            raise
        except BackendUnavailable:
            # sbatch may or may not have reached the controller: reconcile finds the job by
            # its name, or fails the record after the grace period.
            raise
        _complete_run(rt, row)
        return _reread(store, job.job_id)

    def _check(self, spec: JobSpec) -> None:
        """Refuse, before anything is created, what this backend cannot run."""
        steps.check_image(spec.image, spec.nodes)  # pyxis, or refused
        if spec.priority not in NICE:
            raise InvalidSpec(f"priority {spec.priority!r} has no Slurm mapping")
        self._check_shared_folder()

    def _check_shared_folder(self) -> None:
        """On a cluster of more than this host, jobs need a shared folder (staging.py)."""
        nodes = {n for n, _ in commands.nodes()}
        here = {socket.gethostname().split(".")[0], socket.gethostname()}
        if nodes <= here:
            return
        shared = settings.get("AIR_SLURM_SHARED_DIR")
        if not shared:
            raise InvalidSpec(
                f"the Slurm cluster has nodes other than this host ({', '.join(sorted(nodes))})"
                f" and AIR_SLURM_SHARED_DIR is not set: the nodes could not read"
                f" {self.runtime.home}",
                hint="set AIR_SLURM_SHARED_DIR to a folder every node mounts (AIR_HOME under"
                " it, or jobs are staged there and their output fetched back)",
            )

    # --- watching and stopping ------------------------------------------------------------------

    def reconcile(self) -> int:
        try:
            return reconciling.reconcile(self.runtime)
        except BackendUnavailable:  # records keep their last known status
            return 0

    def logs(self, record: JobRecord) -> None:
        """The runner appends to the job's log; a job staged on the shared storage (a home the
        nodes cannot read, staging.py) has its new output fetched into the job's log first."""
        sdir = staging.stage_dir(self.runtime.home, record.job_id)
        if sdir is not None:
            staging.fetch(Path(record.log_path).parent, sdir)

    def cancel(self, record: JobRecord, reason: str, wait_s: float = STOP_WAIT_S) -> JobInfo:
        """scancel (SIGTERM, then SIGKILL after the cluster's KillWait); CANCELLED when done."""
        rt, store = self.runtime, self.runtime.store
        self.reconcile()
        row = _reread(store, record.job_id)
        status = JobStatus(row.status)
        if status.is_terminal():
            raise already_finished(row.job_id, status.value)
        sid = slurm_id_of(row.backend_ref)
        with store.tx() as c:
            if status == JobStatus.RUNNING:
                store.request_stop(c, row.job_id, "cancel", reason)
        if sid is not None:
            commands.scancel(sid)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                job = commands.queue([sid]).get(sid) or commands.show(sid)
                if job is None or job.state.split()[0] not in commands.ACTIVE:
                    break
                time.sleep(0.2)
        row = _reread(store, row.job_id)
        finish(rt, row, JobStatus.CANCELLED, f"CANCELLED: {reason}", done_marker=reconciling.DONE)
        return row_to_info(_reread(store, row.job_id))


def _complete_run(rt: LaunchContext, row: JobRecord) -> None:
    """After ``sbatch``: a claimed spare run completed from the job's plan, and the pool's
    spares topped up for the next launch, by requests to the home's writer that this process
    does not wait for (MLflow in this process where the writer is off)."""
    if not row.run_id:
        return
    try:
        if job_run.read_plan(rt.job_dir(row.job_id)) is not None:
            job_run.complete_from_plan(rt.home, row, job_run.queued_tracker(rt.home, row))
        if rt.wants_spares:
            job_run.keep_spares(rt.home, job_run.queued_tracker(rt.home, row))
    except Exception:  # the job runs; its end applies a plan left behind (backends/settle.py)
        pass


def _reread(store: object, job_id: str) -> JobRecord:
    row = store.row(job_id)  # type: ignore[attr-defined]
    if row is None:
        raise AirError(f"job {job_id} vanished from the store", hint="run `air doctor`")
    return row
