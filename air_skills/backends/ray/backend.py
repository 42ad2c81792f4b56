"""The Ray backend: the same job specs on a Ray cluster, through Ray's Jobs API.

A job with ``backend: ray`` is submitted with ``ray.job_submission.JobSubmissionClient`` to
the cluster at ``RAY_ADDRESS`` (else the address set in AIR_HOME). Its record lives in our
store like a local job's, holding ``backend_ref = "<submission id>@<dashboard URL>"``, and is
reconciled against Ray's ``list_jobs`` on each client call (see ``reconcile``):

    Ray PENDING   -> QUEUED     (waiting for GPUs; resubmitted if Ray gives up after 15 min)
    Ray RUNNING   -> RUNNING
    Ray SUCCEEDED -> SUCCEEDED
    Ray FAILED    -> FAILED     (user: the command failed; infra: Ray could not run it)
    Ray STOPPED   -> CANCELLED  (TIMED_OUT when we stopped it for its timeout_min)
    (gone)        -> FAILED     (infra: deleted behind our back, or the cluster restarted)

A cluster that cannot be reached raises a retryable ``BackendUnavailable`` and never marks a
job failed. Settings (``python -m air_skills.backends.ray config``): ``backend`` (the default
for specs that do not name one), ``ray_address``, ``ray_job_root``, ``ray_max_node_gpus``.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

from air_skills.backends.base import already_finished
from air_skills.backends.images import IMAGE_HOLDS_CODE, image_tags
from air_skills.backends.info import row_to_info
from air_skills.backends.ray import gangs
from air_skills.backends.ray import reconcile as reconciling
from air_skills.backends.ray.cluster import ClusterView, cluster_view, num
from air_skills.backends.ray.image import resolve_ray_image
from air_skills.backends.ray.logs import sync_logs
from air_skills.backends.ray.packaging import entrypoint, upload, working_dir_problem
from air_skills.backends.ray.refs import job_lock, reread, split_ref, submission_id
from air_skills.backends.ray.sdk import (
    DEFAULT_ADDRESS,
    call,
    connect,
    env_address,
    not_found,
    short,
)
from air_skills.backends.ray.settle import finish
from air_skills.backends.ray.submit import submit
from air_skills.errors import BackendUnavailable, InsufficientGpus, InvalidSpec
from air_skills.models import STORED, JobInfo, JobSpec
from air_skills.polling import backoff
from air_skills.runtime.code.job_code import plan_code, ray_working_dir
from air_skills.runtime.launch.duplicates import precheck
from air_skills.runtime.launch.prepare import (
    LaunchContext,
    find_by_idempotency_key,
    job_name,
    launcher_tag,
    prepare_job,
    recording,
)
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus

# How long `cancel` waits for Ray to report the job stopped (Ray: SIGTERM, SIGKILL after 3 s).
STOP_WAIT_S = 15.0
# The job's config travels in an environment variable; keep it far below Linux's 128 KiB.
MAX_CONFIG_BYTES = 96 * 1024


class RayBackend:
    """Submit, reconcile, stop and read logs of jobs on Ray, over one AIR_HOME."""

    entrypoint = staticmethod(entrypoint)  # bench/launch_ray.py submits the same command

    def __init__(self, runtime: LaunchContext) -> None:
        self.runtime = runtime

    def address(self) -> str:
        """Where new jobs go: RAY_API_SERVER_ADDRESS / RAY_ADDRESS, else AIR_HOME's setting,
        else a head on this machine at Ray's default dashboard port."""
        return env_address() or self.runtime.store.setting("ray_address") or DEFAULT_ADDRESS

    # --- launching --------------------------------------------------------------------------

    def launch(self, spec: JobSpec, dry_run: bool = False) -> JobInfo:
        rt, store = self.runtime, self.runtime.store
        ray = connect(self.address())
        cluster = cluster_view(ray)
        dashboard = ray.get_address()
        self._check(spec, cluster)
        name = job_name(spec.name, spec.command)
        if dry_run:
            return JobInfo(
                job_id="dry-run",
                name=name,
                status=JobStatus.QUEUED,
                message=(
                    f"DRY RUN: would submit {spec.command!r} from {spec.workdir} to the Ray"
                    f" cluster at {dashboard} with {spec.gpus} GPU(s) and"
                    f" {spec.cpus or 1} CPU(s); cluster: {cluster.describe()}; nothing was"
                    " launched"
                ),
                priority=spec.priority,
                created_at=datetime.now(UTC),
                backend="ray",
                project=spec.project or "default",
            )
        existing = find_by_idempotency_key(
            store, spec.idempotency_key, spec.model_dump(mode="json")
        )  # the same spec: its job; a different one: idempotency-conflict
        if existing is not None:
            return row_to_info(existing)
        spec, image, image_note = resolve_ray_image(spec)  # its ID as provenance, if known here
        if spec.image and spec.patch:
            raise InvalidSpec(
                "a patch cannot run in an image on Ray: Ray uploads no working_dir beside"
                " image_uri, so the job runs the code the image holds",
                hint="build the patched code into the image, or drop --image (the snapshot and"
                " its patch are uploaded then)",
            )
        # Upload first: a failed upload leaves no record behind, and the window between
        # recording the submission and Ray knowing it is one short request. A snapshot job
        # uploads its snapshot (one folder, so one package, per digest), never the live tree.
        runtime_env: dict[str, Any] = {}
        code = None
        if spec.image:  # Ray takes no working_dir beside image_uri: the image holds the code
            image_note = "; ".join(filter(None, (image_note, IMAGE_HOLDS_CODE)))
        else:
            if spec.code == "snapshot":
                code = plan_code(rt.home, spec.workdir, spec.patch)
            precheck(store, spec, code.snapshot.digest if code else None)  # before the upload
            workdir = ray_working_dir(rt.home, code) if code is not None else spec.workdir
            runtime_env = {"working_dir": workdir}
            upload(ray, dashboard, runtime_env)

        job = prepare_job(
            rt,
            name=name,
            config=spec.config,
            data=spec.data,
            track=spec.track,
            experiment=spec.experiment,
            tags={**spec.tags, "air.backend": "ray", **image_tags(image), **launcher_tag(spec)},
            code=code,
        )
        job_id = job.job_id
        (job.jdir / "output.log").touch()  # renamed into place with its folder, see recording
        notes = [n for n in (job.tracking_note, image_note) if n]
        note = f" ({'; '.join(notes)})" if notes else ""
        with recording(rt, job) as c:
            got, created = store.queue(
                spec.model_dump(mode="json"),
                job_id,
                str(job.log_path),
                job.name,
                job.run_id,
                job.experiment_id,
                f"QUEUED: submitting to the Ray cluster at {dashboard}{note}",
                c=c,
                project=spec.resolved_project(),
                jdir=job.jdir,
                code_digest=job.code["digest"] if job.code else None,
            )
            if created and job.code is not None:
                store.set_code(c, job_id, job.code)
        # A concurrent caller with this key won: the same spec gets its job (ours discarded);
        # another spec raised idempotency-conflict in queue, and `recording` discarded ours.
        if not created:
            self.reconcile()
            return row_to_info(reread(store, got))
        if image_note:  # kept as an event: the message changes as the job goes on
            store.event(job_id, "image", image_note)
        row = reread(store, job_id)
        sid = submission_id(job_id, spec.idempotency_key)
        with job_lock(job.jdir):
            store.set_backend_ref(job_id, f"{sid}@{dashboard}")
            submit(rt, ray, row, spec, sid, cluster, runtime_env, note)
        return row_to_info(reread(store, job_id))

    def _check(self, spec: JobSpec, cluster: ClusterView) -> None:
        """Refuse, before anything is created, a job that this cluster cannot run."""
        problems: list[str] = []
        cpus = spec.cpus or 1
        gangs.check_fit(spec, cluster)  # nodes > 1: enough separate nodes with the GPUs
        if cluster.known:
            override = self.runtime.store.setting("ray_max_node_gpus")
            node_gpus = float(override) if override else cluster.largest_node("GPU")
            if spec.gpus > node_gpus:
                total = cluster.total("GPU")
                where = (
                    f"the largest node has {num(node_gpus)}"
                    if total > node_gpus
                    else f"the cluster has {num(total)} in total"
                )
                raise InsufficientGpus(
                    f"the job asks for {spec.gpus} GPUs but on the Ray cluster at"
                    f" {cluster.address} {where} ({cluster.describe()}); a Ray job's"
                    " entrypoint runs on one node, and Ray would leave it PENDING and fail it"
                    " after 15 minutes",
                    hint=f"ask for at most {num(node_gpus)} GPUs, or add GPU nodes; on an"
                    " autoscaling cluster whose GPU nodes are not up yet, set"
                    " `python -m air_skills.backends.ray config --max-node-gpus N`",
                    requested=spec.gpus,
                    available=node_gpus,
                )
            if cpus > cluster.largest_node("CPU"):
                problems.append(
                    f"cpus: {cpus} asked, but the largest node has"
                    f" {num(cluster.largest_node('CPU'))} ({cluster.describe()})"
                )
        local = cluster.on_this_host if cluster.known else False
        if spec.data and not local:
            problems.append(
                "data: data inputs are paths on this machine, and the Ray cluster is not;"
                " put the data on storage the cluster mounts and pass its path in config or env"
            )
        if spec.track and not local:
            from air_skills.tracking.mlflow import tracking_uri

            uri = tracking_uri(self.runtime.home)
            if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
                problems.append(
                    f"track: the MLflow store {uri} is a file on this machine, which jobs on the"
                    " Ray cluster cannot reach; set MLFLOW_TRACKING_URI to a server they can"
                    " (mlflow server), or launch with track: false"
                )
        config_bytes = len(json.dumps(spec.config))
        if config_bytes > MAX_CONFIG_BYTES:
            problems.append(
                f"config: {config_bytes} bytes of JSON; on Ray it travels in an environment"
                f" variable, at most {MAX_CONFIG_BYTES}: pass large inputs as files"
            )
        too_big = working_dir_problem(spec.workdir or os.getcwd())
        if too_big:
            problems.append(
                f"workdir: {too_big}. List what the job does not need in .rayignore (or"
                " .gitignore), or point workdir at a smaller folder"
            )
        if problems:
            raise InvalidSpec(
                "the job cannot run on Ray as given:",
                problems=problems,
                hint="fix the fields listed, or launch with backend 'local'",
                code="workdir-too-large" if too_big and len(problems) == 1 else None,
            )

    # --- reconciling, logs ------------------------------------------------------------------

    def reconcile(self) -> int:
        """Bring live Ray records in line with Ray's ``list_jobs``; never raises for an
        unreachable cluster (the records keep their last known status, with a note)."""
        return reconciling.reconcile(self.runtime)

    def logs(self, record: JobRecord) -> None:
        """Bring the job's log file up to date with Ray's log of its current attempt."""
        sync_logs(record)

    # --- cancelling -------------------------------------------------------------------------

    def cancel(self, record: JobRecord, reason: str, wait_s: float = STOP_WAIT_S) -> JobInfo:
        """Stop the Ray job (``stop_job``: SIGTERM, then SIGKILL) and record it CANCELLED."""
        rt, store = self.runtime, self.runtime.store
        job_id = record.job_id
        self.reconcile()
        row = reread(store, job_id)
        status = JobStatus(row.status)
        if status.is_terminal():
            raise already_finished(job_id, status.value)
        sid, address = split_ref(row.backend_ref)
        if sid is None:  # not submitted yet: the submitting process stops it when it sees this
            finish(rt, row, JobStatus.CANCELLED, f"CANCELLED: {reason}")
            return row_to_info(reread(store, job_id))
        ray = connect(env_address() or address or DEFAULT_ADDRESS)
        with job_lock(rt.job_dir(job_id)):
            if status == JobStatus.RUNNING:
                with store.tx() as c:
                    store.request_stop(c, job_id, "cancel", reason)
            try:
                call(ray, "stop_job", sid)
            except BackendUnavailable:
                raise
            except Exception as exc:
                if not not_found(exc):
                    raise BackendUnavailable(
                        f"Ray would not stop job {sid}: {short(exc)}",
                        hint="retry",
                        job_id=job_id,
                    ) from None
            job = _wait_stopped(ray, sid, wait_s)
            row = reread(store, job_id)
            if job is not None and str(job.status) in ("SUCCEEDED", "FAILED"):
                sync_logs(row, ray=ray, final=True)
                spec = JobSpec.model_validate_json(row.spec, context=STORED)
                reconciling.settle_terminal(rt, ray, row, spec, job)
            elif job is None or str(job.status) == "STOPPED" or row.status == "QUEUED":
                sync_logs(row, ray=ray, final=True)
                finish(rt, row, JobStatus.CANCELLED, f"CANCELLED: {reason}")
            else:
                store.set_message(
                    job_id,
                    f"RUNNING on Ray as {sid}: stopping ({reason}); Ray has not confirmed yet",
                )
        return row_to_info(reread(store, job_id))


def _wait_stopped(ray: Any, sid: str, wait_s: float) -> Any:
    """Ray's info on the job once it has ended (or at the deadline); None once it is gone."""
    job = None
    for _ in backoff(first_s=0.05, timeout_s=wait_s):
        try:
            job = call(ray, "get_job_info", sid)
        except BackendUnavailable:
            raise
        except Exception:
            return None
        if str(job.status) in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
    return job
