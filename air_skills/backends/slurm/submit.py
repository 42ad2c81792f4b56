"""Submitting one attempt of a job to Slurm: what the node runs, the sbatch options, the call.

The job's command, folder and environment are those a local job gets (``command_launch``),
written owner-only beside the job as ``slurm-launch.json``; the batch script runs the runner
(``runner.py``) on it. Every option is an sbatch argument (argv, never a shell), so paths with
spaces and odd names need no quoting; the extra ``#SBATCH`` lines of the settings go into the
script.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from air_skills import settings
from air_skills.backends.slurm import commands, staging, steps
from air_skills.backends.slurm.runner import LAUNCH_FILE
from air_skills.runtime.execution.launch_env import command_launch
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.process.faults import crash_point
from air_skills.runtime.store.records import JobRecord

if TYPE_CHECKING:
    from air_skills.models import JobSpec

SCRIPT_FILE = "slurm.sbatch"
OUT_FILE = "slurm.out"  # Slurm's own output for the batch step (the job's goes to its log)
REF_PREFIX = "slurm:"
# priority -> sbatch --nice (documented in docs/slurm.md): a higher nice value waits longer.
NICE = {"high": 0, "normal": 10000, "low": 20000}


def ref_of(slurm_id: str) -> str:
    return REF_PREFIX + slurm_id


def slurm_id_of(ref: str | None) -> str | None:
    if ref and ref.startswith(REF_PREFIX):
        return ref[len(REF_PREFIX) :]
    return None


def job_name(job_id: str) -> str:
    """The Slurm job name: how a job whose submitter died is found again in squeue."""
    return f"air-{job_id}"


def time_limit(timeout_min: float | None) -> str | None:
    """timeout_min as sbatch's ``minutes:seconds`` (Slurm stops the job then: TIMEOUT)."""
    if timeout_min is None:
        return None
    seconds = max(60, math.ceil(timeout_min * 60))
    return f"{seconds // 60}:{seconds % 60:02d}"


def sbatch_options(
    job_id: str, spec: JobSpec, jdir: Path, exclude: list[str] | None = None
) -> list[str]:
    """The sbatch arguments for one attempt of the job."""
    opts = [
        f"--job-name={job_name(job_id)}",
        f"--output={jdir / OUT_FILE}",
        "--open-mode=append",
        f"--chdir={jdir}",
        f"--cpus-per-task={spec.cpus or 1}",
        f"--nice={NICE[spec.priority]}",
        "--requeue" if spec.preemptible else "--no-requeue",
        "--export=NONE",  # the job's environment is the runner's file, not the submitter's
    ]
    if spec.nodes > 1:  # one task per node: its runner starts that node's torchrun
        opts += [f"--nodes={spec.nodes}", "--ntasks-per-node=1"]
    if spec.gpus:
        opts.append(f"--gres=gpu:{spec.gpus}")  # per node
    limit = time_limit(spec.timeout_min)
    if limit:
        opts.append(f"--time={limit}")
    for flag, name in (
        ("partition", "AIR_SLURM_PARTITION"),
        ("account", "AIR_SLURM_ACCOUNT"),
        ("qos", "AIR_SLURM_QOS"),
    ):
        value = settings.get(name)
        if value:
            opts.append(f"--{flag}={value}")
    if exclude:
        opts.append(f"--exclude={','.join(sorted(set(exclude)))}")
    return opts


def batch_script(jdir: Path, nodes: int = 1) -> str:
    """The batch script: the settings' extra ``#SBATCH`` lines, then the runner (one per node
    through srun for several nodes)."""
    extra = settings.get("AIR_SLURM_EXTRA") or ""
    lines = ["#!/bin/sh"]
    lines += [
        line if line.startswith("#SBATCH") else f"#SBATCH {line}"
        for line in (part.strip() for part in extra.split(";"))
        if line
    ]
    if nodes > 1:
        return "\n".join(lines + steps.gang_script_lines(jdir)) + "\n"
    runner = [sys.executable, "-m", "air_skills.backends.slurm.runner", str(jdir)]
    lines.append("exec " + shlex.join(runner))
    return "\n".join(lines) + "\n"


def _write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Write a file with its final mode from creation (it may hold secrets), then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_launch(rt: LaunchContext, row: JobRecord, spec: JobSpec) -> Path:
    """The job's command as a local job gets it, for the runner on the node to start; the
    folder the node runs it from (the job's, or its copy on the shared storage: staging.py)."""
    jdir = rt.job_dir(row.job_id)
    data: dict[str, Any] = spec.model_dump(mode="json")
    # GPU indices are Slurm's to give: the runner takes CUDA_VISIBLE_DEVICES from the node.
    # Several nodes or an image: the plain command, wrapped below (steps.py).
    plain = {**data, "image": None, **({"procs": 1, "nodes": 1} if spec.nodes > 1 else {})}
    if spec.image:  # its container is its sandbox, as a local image job's
        plain["sandbox"] = "off"
    sandboxed = plain.get("sandbox") == "on"
    rdir = staging.stage_dir(rt.home, row.job_id) or jdir  # where the node runs it
    if rdir != jdir:  # its sandbox is made for the staged folder, below
        plain["sandbox"] = "off"
    gpus = list(range(spec.gpus))
    if sandboxed and spec.gpus:  # Slurm picks them on the node (its cgroup confines the job)
        gpus = list(range(max(spec.gpus, _gpu_nodes())))
    launch = command_launch(rt.home, row, plain, gpus)
    if spec.image:
        argv = steps.container_argv(spec.image, launch.argv, jdir, launch.cwd)
        launch = replace(launch, argv=argv)
    if spec.nodes > 1:
        launch = steps.node_gang(launch, data, jdir)
    record = {
        "nodes": spec.nodes,
        "srun_step": bool(spec.image),
        "argv": launch.argv,
        "cwd": launch.cwd,
        "env": launch.env,
        "log_path": row.log_path,
        "config": spec.config,
        # bwrap wraps the command (argv[0]): a node without it refuses the job (runner.py)
        "sandbox": sandboxed,
        "slirp": launch.slirp,  # the user-mode network that serves it, where there is one
    }
    if rdir != jdir:
        record = staging.stage(jdir, rdir, record)
        if sandboxed:
            record.update(_staged_sandbox(rt, spec, record, rdir, gpus))
    _write_private(rdir / LAUNCH_FILE, json.dumps(record))
    _write_private(rdir / SCRIPT_FILE, batch_script(rdir, spec.nodes), 0o700)
    return rdir


def _gpu_nodes() -> int:
    """How many ``nvidiaN`` nodes this host's device folder holds (a Slurm node's, here)."""
    from air_skills.runtime.execution.sandbox_devices import gpu_nodes

    root = settings.get("AIR_SANDBOX_DEV_ROOT") or "/dev"
    return sum(1 for n in gpu_nodes(root) if n.startswith("nvidia") and n[6:].isdigit())


def _staged_sandbox(
    rt: LaunchContext, spec: JobSpec, record: dict[str, Any], sdir: Path, gpus: list[int]
) -> dict[str, Any]:
    """The staged command in the sandbox a local job gets, made for its staged folder (the
    node cannot read AIR_HOME): its argv, and the slirp4netns that serves its network."""
    from air_skills.runtime.execution import job_env, sandbox, sandbox_devices, sandbox_net

    said = job_env.launch_environment(os.environ)
    bwrap = sandbox.bwrap_path(said)
    if bwrap is None:
        raise sandbox.SandboxUnavailable(sandbox.unavailable(said) or "no bwrap")
    command = record["argv"]
    (sdir / "checkpoints").mkdir(exist_ok=True)  # made now: handed to the job's uid below
    root = settings.get("AIR_SANDBOX_DEV_ROOT", said) or "/dev"
    view = sandbox.view(
        command,
        bwrap=bwrap,
        home=rt.home,
        jdir=sdir,
        cwd=record["cwd"],
        workdir=record["cwd"],
        writable=spec.writable,
        network=spec.network,
        hidden=spec.hidden,
        dev=sandbox_devices.dev_args(gpus, root),
        environ={**said, **record["env"]},
        trusted=not spec.patch,
        tmp_size=sandbox.tmp_bytes(spec.disk_gb or settings.get("AIR_JOB_DISK_GB", said)),
    )
    slirp = sandbox_net.slirp_path(said) if view.network else None
    return {"argv": view.argv(command), "slirp": slirp}


def submit(
    rt: LaunchContext, row: JobRecord, spec: JobSpec, exclude: list[str] | None = None
) -> str:
    """Submit one attempt; record its Slurm id on the job. Returns the Slurm id."""
    jdir = write_launch(rt, row, spec)
    (jdir / "slurm-exit.json").unlink(missing_ok=True)  # a retry's end is its own
    (rt.job_dir(row.job_id) / "slurm-exit.json").unlink(missing_ok=True)
    slurm_id = commands.sbatch(
        [*sbatch_options(row.job_id, spec, jdir, exclude), str(jdir / SCRIPT_FILE)]
    )
    crash_point("slurm:submitted")  # tests: a submitter killed before it noted the id
    if not rt.store.set_backend_ref(row.job_id, ref_of(slurm_id), expected=row.backend_ref):
        commands.scancel(slurm_id)  # another process submitted this attempt first
        return slurm_id
    rt.store.set_message(row.job_id, f"QUEUED on Slurm as job {slurm_id}: waiting for Slurm")
    rt.store.event(row.job_id, "slurm-submitted", f"submitted to Slurm as job {slurm_id}")
    return slurm_id
