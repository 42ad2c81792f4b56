"""Submitting one attempt of a job to Ray: its environment, the submit call, its message."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from air_skills.backends.images import ray_image
from air_skills.backends.ray import gangs
from air_skills.backends.ray.cluster import ClusterView, num
from air_skills.backends.ray.sdk import call, short
from air_skills.backends.ray.settle import finish
from air_skills.errors import BackendUnavailable
from air_skills.home import read_job_env
from air_skills.job_folder import JobFolder, write_in
from air_skills.models import JobSpec
from air_skills.runtime.execution import gang
from air_skills.runtime.execution.launch_env import thread_caps, user_env
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus

# The job folder on a cluster that is not this machine (config, checkpoints, data links).
DEFAULT_REMOTE_JOB_ROOT = "/tmp/air-skills/jobs"
CHOSEN = "ray-folder"  # in the job's folder: the job's folder on the node, every attempt


def job_env(
    rt: LaunchContext, row: JobRecord, spec: JobSpec, cluster: ClusterView | None, attempt: int
) -> tuple[dict[str, str], str]:
    """The variables a job receives (as a local job does), and its folder on the node."""
    job_id = row.job_id
    jdir = rt.job_dir(job_id)
    try:  # the same folder every attempt; read and written by descriptor (a link is neither)
        with JobFolder.open(jdir) as f:
            folder = f.read(CHOSEN, 4096).decode("utf-8", "replace").strip()
    except OSError:  # none yet (or not a regular file: replaced below)
        folder = ""
    if not folder:
        local = cluster.on_this_host if cluster is not None and cluster.known else False
        if local:
            folder = str(rt.job_dir(job_id))
        else:
            root = rt.store.setting("ray_job_root") or DEFAULT_REMOTE_JOB_ROOT
            folder = f"{root.rstrip('/')}/{job_id}"
        write_in(jdir, CHOSEN, folder)
    cpus = spec.cpus or 1
    env = thread_caps(cpus)
    env.update(
        {
            "AIR_JOB_ID": job_id,
            "AIR_CONFIG_FILE": f"{folder}/config.json",
            "AIR_CHECKPOINT_DIR": f"{folder}/checkpoints",
            "AIR_DATA_DIR": f"{folder}/data",
            "AIR_ATTEMPT": str(attempt),
            "AIR_CONFIG_JSON": json.dumps(spec.config),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if row.code:  # a snapshot job: the digest of the code it runs, as a local job gets
        env["AIR_CODE_DIGEST"] = json.loads(row.code)["digest"]
    if row.run_id:
        from air_skills.tracking.mlflow import tracking_uri

        env["MLFLOW_TRACKING_URI"] = tracking_uri(rt.home)
        env["MLFLOW_RUN_ID"] = row.run_id
        env["MLFLOW_EXPERIMENT_ID"] = row.experiment_id or ""
    # The values live owner-only in the job's folder (the record keeps names); ours win.
    env.update(user_env(read_job_env(rt.job_dir(row.job_id)) or spec.env))
    return env, folder


def submit(
    rt: LaunchContext,
    ray: Any,
    row: JobRecord,
    spec: JobSpec,
    sid: str,
    cluster: ClusterView | None,
    runtime_env: dict[str, Any],
    note: str = "",
) -> None:
    """Submit one attempt (the caller holds the job's lock and has recorded ``sid``)."""
    job_id = row.job_id
    attempt = row.attempts + 1
    env, folder = job_env(rt, row, spec, cluster, attempt)
    run = gangs.entry(spec, folder)  # the command itself, or torchrun, or the gang's driver
    env.update(run.env)
    if gang.is_gang(spec.model_dump(mode="json")):  # each rank's share of the job's CPUs
        env.update(thread_caps(max(1, (spec.cpus or 1) // gangs.procs(spec))))
    dashboard = ray.get_address()
    try:
        call(
            ray,
            "submit_job",
            entrypoint=run.entrypoint,
            submission_id=sid,
            runtime_env={**runtime_env, **ray_image(spec), "env_vars": env},
            entrypoint_num_gpus=run.num_gpus,
            entrypoint_num_cpus=run.num_cpus,
            metadata={"air_job_id": job_id, "air_name": row.name[:100]},
        )
    except BackendUnavailable as exc:
        # The request may or may not have reached Ray: the record stays QUEUED and the
        # next reconcile adopts the Ray job, or settles the record if Ray never got it.
        rt.store.set_message(
            job_id,
            f"QUEUED: submission to Ray at {dashboard} unconfirmed ({exc.message});"
            " settled on the next call that reaches Ray",
        )
        exc.context["job_id"] = job_id
        raise
    except Exception as exc:
        if "already exists" in str(exc):
            rt.store.event(job_id, "ray-accepted", f"adopted the Ray job {sid}")
            rt.store.set_message(
                job_id,
                f"QUEUED on Ray: adopted the existing Ray job {sid} (same idempotency key)",
            )
            return
        finish(
            rt,
            row,
            JobStatus.FAILED,
            f"FAILED (infra): Ray refused the submission: {short(exc)}. Next: fix what it"
            " names, then relaunch",
            failure_kind="infra",
        )
        return
    rt.store.event(job_id, "ray-accepted", f"Ray accepted submission {sid}")
    current = rt.store.row(job_id)
    if current is not None and JobStatus(current.status).is_terminal():
        # Cancelled while we were submitting: make Ray agree.
        with contextlib.suppress(Exception):
            ray.stop_job(sid)
        return
    rt.store.set_message(job_id, queued_message(spec, sid, cluster) + note)


def queued_message(spec: JobSpec, sid: str, cluster: ClusterView | None) -> str:
    text = f"QUEUED on Ray as {sid}"
    if spec.gpus and cluster is not None and cluster.known:
        free = cluster.free("GPU")
        free_text = f", {num(free)} free" if free is not None else ""
        text += (
            f": waiting for {spec.gpus} GPU(s) (cluster: {num(cluster.total('GPU'))} GPUs"
            f"{free_text}); Ray starts it when they are free"
        )
    else:
        text += ": waiting for Ray to start it"
    return text
