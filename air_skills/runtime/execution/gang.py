"""Gangs: a job of several processes run by torchrun, and what its log says when it failed.

A job with ``procs > 1`` (or ``nodes > 1``) runs under ``torch.distributed.run``: torchrun
starts one process per rank, sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR
and MASTER_PORT, prefixes each rank's output lines with ``[rankN]: `` and, when one rank fails,
stops the others (SIGTERM, then SIGKILL after the shutdown timeout) and prints which rank
failed first. The supervisor reads that back (``read_failure``) for the job's message.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.runtime.process.proc import signal_name
from air_skills.runtime.results import nccl
from air_skills.runtime.results.outcomes import InfraFailure
from air_skills.runtime.results.summary_block import read_tail

PREFIX_TEMPLATE = "[rank${rank}]: "
_PREFIX = re.compile(r"^\[rank(\d+)\]: ?")
_RAY_PREFIX = re.compile(r"^\([^)]*\) ")  # Ray's "(NodeRank pid=1, ip=...) " before a line
_PYTHON = re.compile(r"^python[0-9.]*$")
# torchrun's failure summary: the rank that failed first, and how.
_ROOT = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S
)
_ERRORISH = re.compile(r"(Error|Exception|error:|FAILED|Traceback|Killed|Aborted)")
ATTEMPT_BANNER = "[air] attempt "


def procs_of(spec: dict[str, Any], gpus_per_node: int | None = None) -> int:
    """Processes per node: ``procs`` (``gpu``: one per GPU of the node)."""
    procs = spec.get("procs", 1)
    if procs == "gpu":
        return max(1, gpus_per_node if gpus_per_node is not None else spec.get("gpus", 0))
    return int(procs)


def is_gang(spec: dict[str, Any], gpus_per_node: int | None = None) -> bool:
    return procs_of(spec, gpus_per_node) > 1 or int(spec.get("nodes", 1)) > 1


def is_python(program: str) -> bool:
    return bool(_PYTHON.match(os.path.basename(program)))


def torchrun_argv(
    command: list[str],
    procs: int,
    log_dir: str,
    *,
    grace_s: float,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    rendezvous_s: float | None = None,
) -> list[str]:
    """The argv that runs ``command`` as ``procs`` ranks on this node under torchrun.

    torchrun runs under the command's own Python when the command is a Python one (torch must
    be installed where the script runs); any other program runs as is (``--no-python``) under
    the runtime's Python. Single-node gangs use ``--standalone`` (a free port on localhost).
    A node that has not joined the rendezvous within ``rendezvous_s`` (default:
    AIR_RENDEZVOUS_TIMEOUT_S) fails the gang (torchrun's join_timeout).
    """
    if rendezvous_s is None:
        rendezvous_s = settings.get("AIR_RENDEZVOUS_TIMEOUT_S")
    rdzv_s = max(1, math.ceil(rendezvous_s))
    python = command[0] if is_python(command[0]) else sys.executable
    argv = [python, "-m", "torch.distributed.run"]
    if nnodes == 1:
        argv += ["--standalone"]
    else:
        argv += [
            "--nnodes",
            str(nnodes),
            "--node-rank",
            str(node_rank),
            "--master-addr",
            str(master_addr),
            "--master-port",
            str(master_port),
        ]
    argv += [
        "--nproc-per-node",
        str(procs),
        "--rdzv-conf",
        # join_timeout: the c10d rendezvous of --standalone; timeout: the static one of nodes.
        f"join_timeout={rdzv_s},timeout={rdzv_s}",
        # Every rank's output, line by line with its prefix, into the job's log.
        "--tee",
        "3",
        "--log-dir",
        log_dir,
        "--monitor-interval",
        "0.1",
        # A failing rank's peers get SIGTERM, then SIGKILL this much later.
        "--shutdown-timeout",
        str(max(1, math.ceil(grace_s))),
        "--no-python",
        *command,
    ]
    return argv


def gang_env() -> dict[str, str]:
    """What torchrun gets besides the job's environment: the global-rank line prefix."""
    return {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": PREFIX_TEMPLATE}


def rank_log_dir(jdir: Path) -> str:
    """Where torchrun keeps each rank's own output files (in the job's folder)."""
    return os.fspath(jdir / "ranks")


def attempt_output(text: str) -> str:
    """The part of a log tail that the last attempt wrote (after its banner, if any)."""
    at = text.rfind("\n" + ATTEMPT_BANNER)
    return text[at + 1 :] if at >= 0 else text


def rank_lines(text: str, rank: int) -> list[str]:
    """The lines of ``text`` that rank ``rank`` printed, without their prefix."""
    out = []
    for line in text.splitlines():
        m = _PREFIX.match(_RAY_PREFIX.sub("", line, count=1))
        if m and int(m.group(1)) == rank:
            line = _RAY_PREFIX.sub("", line, count=1)
            # torch prefixes a rank's traceback itself: "[rank1]: [rank1]: Traceback ..."
            while m:
                line = line[m.end() :]
                m = _PREFIX.match(line)
            out.append(line)
    return out


def strip_ray_prefix(line: str) -> str:
    """The line without the ``(NodeRank pid=..., ip=...) `` that Ray puts before it."""
    return _RAY_PREFIX.sub("", line, count=1)


def filter_rank(text: str, rank: int) -> str:
    """``air logs --rank N``: only rank N's lines (with their prefix; on Ray, after the
    ``(NodeRank pid=..., ip=...)`` that Ray puts before an actor's output)."""
    line_of = re.compile(rf"^(?:\([^)]*\) )?\[rank{rank}\]:")
    kept = [line for line in text.splitlines(keepends=True) if line_of.match(line)]
    return "".join(kept)


def last_error_line(lines: list[str]) -> str | None:
    """The last line that reads as an error, else the last non-empty line."""
    nonempty = [ln.strip() for ln in lines if ln.strip()]
    for line in reversed(nonempty):
        if _ERRORISH.search(line):
            return line[:300]
    return nonempty[-1][:300] if nonempty else None


@dataclass(frozen=True)
class Failure:
    """What a failed attempt's log says: the rank that failed first and how, or an NCCL sign."""

    exit_code: int | None
    signal: int | None = None  # the signal number, when the failing rank was killed
    rank: int | None = None
    error_line: str | None = None
    infra: InfraFailure | None = None


def read_failure(log_path: str, rc: int, gang: bool) -> Failure:
    """Read the end of a failed attempt's log: torchrun's root cause, NCCL signatures.

    ``rc`` is the command's (for a gang: torchrun's) return code, negative for a signal.
    """
    text = attempt_output(read_tail(log_path))
    code, sig = (rc, None) if rc >= 0 else (None, -rc)
    rank = None
    lines = text.splitlines()
    if gang:
        root = _ROOT.search(text)
        if root:
            rank, rank_rc = int(root.group(1)), int(root.group(2))
            code, sig = (rank_rc, None) if rank_rc >= 0 else (None, -rank_rc)
            lines = rank_lines(text, rank)
    error = last_error_line(lines) if rank is not None else None
    infra = None
    found = nccl.signature(lines)
    if found is not None:
        infra = InfraFailure(nccl.describe(*found), "nccl")
    elif gang and rank is not None and sig is not None:
        infra = InfraFailure(
            f"rank {rank} was killed by {signal_name(sig)} while the others waited in a collective",
            "nccl",
        )
    return Failure(code, sig, rank, error, infra)
