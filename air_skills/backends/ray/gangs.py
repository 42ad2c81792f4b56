"""Gangs on Ray: the entrypoint of a job with procs > 1 or nodes > 1, the fit check, and the
infra failures its log shows (a dead node, NCCL's signatures).

One node: torchrun ``--standalone`` is the entrypoint itself, on the node Ray picks for the
job's GPUs. Several nodes: gang_driver.py is, and it places one torchrun per node.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from air_skills import settings
from air_skills.backends.ray.cluster import ClusterView, num
from air_skills.backends.ray.packaging import entrypoint
from air_skills.errors import InsufficientGpus
from air_skills.models import JobSpec
from air_skills.runtime.execution import config_args, gang
from air_skills.runtime.results import nccl
from air_skills.runtime.results.outcomes import InfraFailure
from air_skills.runtime.results.summary_block import read_tail

# Lines the gang's driver (gang_driver.py) writes to the log; read back by log_infra.
NODE_DIED = "[air] node died:"
NOT_PLACED = "[air] not placed:"
NOT_JOINED = "[air] not joined:"  # a node's actor never started within the rendezvous timeout
# The driver's own environment: every line of every rank, with no colour codes.
DRIVER_ENV = {"RAY_DEDUP_LOGS": "0", "RAY_COLOR_PREFIX": "0"}


@dataclass(frozen=True)
class Entry:
    """What ``submit_job`` gets: the shell entrypoint and what its process reserves."""

    entrypoint: str
    num_gpus: float | None
    num_cpus: float
    env: dict[str, str]


def procs(spec: JobSpec) -> int:
    return gang.procs_of(spec.model_dump(mode="json"))


def entry(spec: JobSpec, folder: str) -> Entry:
    """The entrypoint for ``spec`` (``folder`` is the job's folder on the node)."""
    cpus = spec.cpus or 1
    grace = settings.get("AIR_GRACE_S")
    argv = config_args.job_argv(spec.model_dump(mode="json"))  # its config's flags too
    if spec.nodes == 1:
        command = argv
        if procs(spec) > 1:
            command = gang.torchrun_argv(command, procs(spec), f"{folder}/ranks", grace_s=grace)
            return Entry(entrypoint(command), spec.gpus or None, cpus, gang.gang_env())
        return Entry(entrypoint(command), spec.gpus or None, cpus, {})
    plan = {
        "command": argv,
        "nodes": spec.nodes,
        "procs": procs(spec),
        "gpus": spec.gpus,
        "cpus": cpus,
        "grace_s": grace,
        "rendezvous_s": settings.get("AIR_RENDEZVOUS_TIMEOUT_S"),
        "log_dir": f"{folder}/ranks",
    }
    python = spec.command[0] if gang.is_python(spec.command[0]) else sys.executable
    driver = [python, "-m", "air_skills.backends.ray.gang_driver"]
    # The driver only waits: the bundles hold the nodes' CPUs and GPUs.
    return Entry(entrypoint(driver), None, 0, {"AIR_GANG_PLAN": json.dumps(plan), **DRIVER_ENV})


def check_fit(spec: JobSpec, cluster: ClusterView) -> None:
    """Refuse a gang that this cluster can never place: fewer nodes with the GPUs than asked."""
    if spec.nodes <= 1 or not cluster.known:
        return
    cpus = spec.cpus or 1
    fit = [
        n
        for n in cluster.nodes
        if n.get("resources_total", {}).get("GPU", 0) >= spec.gpus
        and n.get("resources_total", {}).get("CPU", 0) >= cpus
    ]
    if len(fit) >= spec.nodes:
        return
    raise InsufficientGpus(
        f"the job asks for {spec.nodes} nodes with {spec.gpus} GPU(s) and {cpus} CPU(s) each,"
        f" but the Ray cluster at {cluster.address} has {len(fit)} such node(s)"
        f" ({cluster.describe()})",
        hint=f"ask for at most {len(fit)} nodes or fewer GPUs per node"
        f" (the largest node has {num(cluster.largest_node('GPU'))}), or add nodes",
        requested=spec.nodes * spec.gpus,
        available=len(fit),
    )


def log_infra(log_path: str, nodes: int) -> tuple[InfraFailure, bool] | None:
    """(the infra failure that the attempt's log shows, whether a retry may place it again),
    or None when the log shows none: a dead node, a gang that could not be placed, NCCL."""
    lines = gang.attempt_output(read_tail(log_path)).splitlines()
    for line in reversed(lines):
        bare = gang.strip_ray_prefix(line)
        if bare.startswith(NODE_DIED):
            what = bare[len(NODE_DIED) :].strip()
            # Retried as any infra failure when the cluster still has room for the gang (the
            # reconciler checks its fit first); the retry's placement waits up to the
            # rendezvous timeout for the nodes, then fails as NOT_PLACED.
            return InfraFailure(f"a node of the {nodes}-node gang died ({what})", "ray"), True
        for mark in (NOT_PLACED, NOT_JOINED):  # not retried: a person looks at the cluster
            if bare.startswith(mark):
                return InfraFailure(bare[len(mark) :].strip(), "ray"), False
    found = nccl.signature(gang.strip_ray_prefix(line) for line in lines)
    if found is not None:
        return InfraFailure(nccl.describe(*found), "nccl"), True
    return None


def rank_failure(log_path: str, exit_code: int, spec: JobSpec) -> gang.Failure:
    """For a failed gang: the rank that failed first, its code and last error line."""
    if exit_code == 0 or not gang.is_gang(spec.model_dump(mode="json")):
        return gang.Failure(exit_code)
    return gang.read_failure(log_path, exit_code, gang=True)
