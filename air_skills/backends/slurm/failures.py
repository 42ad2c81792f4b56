"""Whether a Slurm job that failed failed in the infrastructure: NCCL's signatures in its log
(the classifier local gangs use, runtime/execution/gang.py) or a node drained or down under it.

Such a failure is retried as infra (its node excluded where the cluster has others), not
charged to the job's own ``max_retries``.
"""

from __future__ import annotations

from dataclasses import dataclass

from air_skills.backends.slurm import commands
from air_skills.errors import AirError
from air_skills.runtime.execution import gang
from air_skills.runtime.results.nccl import MARK as NCCL_MARK

BAD_STATES = ("drain", "down", "fail", "not_responding")


@dataclass(frozen=True)
class InfraCause:
    """What went wrong (for the message and the cordon note), and the node(s) to exclude."""

    what: str
    nodes: list[str]


def hostnames(nodelist: str) -> list[str]:
    """A Slurm host list (``gpu-a[01-02]``) as names; one name needs no scontrol."""
    if not nodelist:
        return []
    if "[" not in nodelist and "," not in nodelist:
        return [nodelist]
    proc = commands._run(["scontrol", "show", "hostnames", nodelist])
    return proc.stdout.split() if proc.returncode == 0 else [nodelist]


def infra_cause(
    log_path: str, code: int | None, gang_job: bool, nodelist: str
) -> InfraCause | None:
    """An infra cause of the failed attempt, or None (the command's own failure)."""
    nodes = hostnames(nodelist)
    failure = gang.read_failure(log_path, code if code is not None else 1, gang_job)
    if failure.infra is not None and failure.infra.source == "nccl":
        return InfraCause(f"{failure.infra.what} ({NCCL_MARK})", nodes)
    try:
        states = dict(commands.nodes())
    except AirError:
        return None
    bad = [n for n in nodes if any(b in states.get(n, "") for b in BAD_STATES)]
    if bad:
        said = ", ".join(f"{n} ({states[n]})" for n in bad)
        return InfraCause(f"node {said} under the job", bad)
    return None
