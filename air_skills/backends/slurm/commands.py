"""Slurm's commands, driven as argv lists (never a shell): sbatch, squeue, scontrol, scancel,
sinfo; their output parsed; a cluster that cannot be reached is a retryable error."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from air_skills.backends.settle import short
from air_skills.errors import BackendUnavailable, InvalidSpec

TIMEOUT_S = 30.0
# Slurm's job states (squeue %T, scontrol JobState), by what they mean for a job's record.
WAITING = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESV_DEL_HOLD"}
)
ACTIVE = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "STOPPED"}
)
INFRA = frozenset({"NODE_FAIL", "BOOT_FAIL", "LAUNCH_FAILED"})


def _run(argv: list[str], timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise BackendUnavailable(
            f"`{argv[0]}` is not on PATH: this machine is not a Slurm login node",
            hint="run from a machine with the Slurm client commands, or launch with backend"
            " 'local'",
            retryable=False,
        )
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False, stdin=None
        )
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(
            f"`{' '.join(argv[:2])}` did not answer within {timeout_s:.0f} s",
            hint="check that slurmctld is up (`sinfo`), then retry",
        ) from None


def _unreachable(argv: list[str], proc: subprocess.CompletedProcess[str]) -> BackendUnavailable:
    return BackendUnavailable(
        f"`{argv[0]}` failed (exit {proc.returncode}): {short(proc.stderr or proc.stdout)}",
        hint="check the cluster with `sinfo`, then retry",
    )


def sbatch(args: list[str]) -> str:
    """Submit a batch script (its options, then its path, last); the Slurm job id."""
    argv = ["sbatch", "--parsable", *args]
    proc = _run(argv)
    if proc.returncode != 0:
        err = proc.stderr.strip()
        if "Unable to contact" in err or "Socket timed out" in err:
            raise _unreachable(argv, proc)
        raise InvalidSpec(
            f"Slurm refused the job: {short(err)}",
            hint="fix what sbatch names (partition, account, QOS, GPUs, time), then relaunch",
        )
    return proc.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    node: str = ""


def queue(ids: list[str], names: frozenset[str] = frozenset()) -> dict[str, SlurmJob]:
    """The jobs squeue still knows among ``ids`` or named one of ``names`` (keyed by the name
    then): any state, while Slurm keeps them."""
    if not ids and not names:
        return {}
    argv = ["squeue", "-h", "--states=all", "-o", "%i|%T|%r|%N|%j"]
    proc = _run(argv)
    if proc.returncode != 0:
        raise _unreachable(argv, proc)
    wanted, found = set(ids), {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5:
            continue
        job = SlurmJob(parts[0], parts[1], parts[2], node=parts[3])
        if parts[0] in wanted:
            found[parts[0]] = job
        elif parts[4] in names:
            found[parts[4]] = job
    return found


def show(job_id: str) -> SlurmJob | None:
    """``scontrol show job``: state and exit code; None when Slurm has forgotten the job."""
    argv = ["scontrol", "show", "job", "-o", job_id]
    proc = _run(argv)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return None
        raise _unreachable(argv, proc)
    fields = dict(p.split("=", 1) for p in proc.stdout.split() if "=" in p)
    code, sig = None, None
    if ":" in fields.get("ExitCode", ""):
        a, b = fields["ExitCode"].split(":", 1)
        code, sig = int(a), int(b)
    return SlurmJob(
        job_id,
        fields.get("JobState", "UNKNOWN"),
        fields.get("Reason", ""),
        code,
        sig,
        fields.get("NodeList", "") if fields.get("NodeList") != "(null)" else "",
    )


def scancel(job_id: str, signal: str | None = None) -> None:
    """Cancel (SIGTERM, then SIGKILL after the cluster's KillWait), or only signal the job."""
    argv = ["scancel", *([f"--signal={signal}", "--full"] if signal else []), job_id]
    proc = _run(argv)
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
        if "already completing or completed" in proc.stderr:
            return
        raise _unreachable(argv, proc)


def nodes() -> list[tuple[str, str]]:
    """(node name, state) of every node, from sinfo."""
    argv = ["sinfo", "-h", "-N", "-o", "%N|%T"]
    proc = _run(argv)
    if proc.returncode != 0:
        raise _unreachable(argv, proc)
    rows = [line.strip().split("|", 1) for line in proc.stdout.splitlines() if "|" in line]
    return [(r[0], r[1]) for r in rows]


# sacct's answer when the cluster keeps no accounting (accounting_storage/none).
NO_ACCOUNTING = ("accounting storage is disabled", "slurmdbd", "Connection refused")
SACCT_FIELDS = "JobID,State,ExitCode,NodeList"


def accounting(ids: list[str]) -> dict[str, SlurmJob] | None:
    """What ``sacct`` remembers of ``ids`` (jobs squeue and scontrol forgot); None when the
    cluster keeps no accounting (then the runner's ``slurm-exit.json`` settles them)."""
    if not ids:
        return {}
    argv = ["sacct", "-n", "-X", "--parsable2", "-j", ",".join(ids), "-o", SACCT_FIELDS]
    try:
        proc = _run(argv)
    except BackendUnavailable:
        return None
    if proc.returncode != 0 or any(s in proc.stderr for s in NO_ACCOUNTING):
        return None
    return parse_sacct(proc.stdout)


def parse_sacct(text: str) -> dict[str, SlurmJob]:
    """``sacct --parsable2 -o JobID,State,ExitCode,NodeList`` lines, by job id."""
    found: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or "." in parts[0]:  # a step's line (123.batch): its job's says it
            continue
        code, sig = None, None
        if ":" in parts[2]:
            a, b = parts[2].split(":", 1)
            code, sig = int(a), int(b)
        state = parts[1].split()[0] if parts[1] else "UNKNOWN"  # "CANCELLED by 1000"
        node = "" if parts[3] in ("", "None assigned") else parts[3]
        found[parts[0]] = SlurmJob(parts[0], state, "", code, sig, node)
    return found
