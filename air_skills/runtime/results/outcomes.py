"""How an attempt's end becomes the job's next state: finish (and how) or requeue (and why).

One pure policy for every backend. A backend gathers what it knows when an attempt ends into
an ``AttemptEnd`` and calls ``classify``; it records the ``Outcome`` it gets back (for the
local runtime: ``Store.record_outcome``). The rules, first match wins:

=====  ==========================================  ========================================
row    the attempt ended with                      the job
=====  ==========================================  ========================================
1      a cancel request                            CANCELLED: <stop reason>
2      a preempt request                           requeued (kind ``preempted``)
3      an infra failure, infra retries left        requeued (kind ``infra``)
4      an infra failure, infra retries spent       FAILED, failure_kind ``infra``
5      the timeout                                 TIMED_OUT, failure_kind ``user``
6      exit code 0                                 SUCCEEDED
7      any other exit or signal, retries left      requeued (kind ``user``)
8      any other exit or signal, retries spent     FAILED, failure_kind ``user``
=====  ==========================================  ========================================

A command that could not start at all is ``start_failed`` (FAILED, ``user``, 127 or 126; with
no exit code when its folder was deleted while it waited).

Infra failures carry where they come from (``InfraFailure.source``), which only changes the
wording: ``gpu`` (a GPU fault found by a health check; the GPU is cordoned), ``lost`` (the
job's supervisor died or never started), ``ray`` (Ray could not run the job) and ``nccl``
(a collective failed: NCCL's signatures in the log, or a gang's rank killed by a signal; see
runtime/results/nccl.py; the message carries ``reason: nccl`` and the retry runs a deep preflight
first) and ``container`` (the container engine failed before the command ran: exit 125).
A gang's failure names the rank that failed first and its last error line. A backend that sees
a stop request it can no longer honour (a preempt whose supervisor is lost) leaves it out of
the ``AttemptEnd``. Every FAILED and TIMED_OUT message ends with its ``Next:`` step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from air_skills import settings
from air_skills.runtime.results.nccl import MARK as NCCL_MARK
from air_skills.status import JobStatus


def max_infra_retries() -> int:
    """AIR_MAX_INFRA_RETRIES, read when a decision is made (a bad value is a clean error)."""
    return settings.get("AIR_MAX_INFRA_RETRIES")


@dataclass(frozen=True)
class InfraFailure:
    """An infrastructure failure: ``what`` describes it, ``source`` picks the wording."""

    what: str
    source: Literal["gpu", "lost", "ray", "nccl", "container"] = "gpu"


@dataclass(frozen=True)
class AttemptEnd:
    """Everything the policy needs to know about one attempt's end."""

    job_id: str
    exit_code: int | None = None  # the command's exit code (>= 0), when it exited
    signal: str | None = None  # the signal's name, when one killed it
    stop_request: str | None = None  # "cancel" or "preempt", when one was recorded
    stop_reason: str | None = None
    timed_out: bool = False
    timeout_min: float | None = None
    infra: InfraFailure | None = None
    user_retries: int = 0  # retries after the command's own failures, used so far
    max_retries: int = 0  # the spec's max_retries
    infra_retries: int = 0
    max_infra_retries: int | None = None  # None: AIR_MAX_INFRA_RETRIES
    runner: str = ""  # where it ran, for the FAILED message (e.g. "Ray job raysub-1")
    rank: int | None = None  # a gang's rank that failed first (runtime/execution/gang.py)
    rank_error: str | None = None  # that rank's last error line
    # A flag from the config (config_as: args | both) that the command refused, and config_as
    refused_flag: str | None = None
    config_as: str | None = None


@dataclass(frozen=True)
class Outcome:
    """The job's next state: ``finish`` with ``status``, or ``requeue`` with ``kind``."""

    action: Literal["finish", "requeue"]
    message: str
    status: JobStatus | None = None  # finish only
    failure_kind: str | None = None  # finish only: "user", "infra" or None
    kind: str | None = None  # requeue only: "preempted", "user" or "infra"
    exit_code: int | None = None
    signal: str | None = None


def _finish(
    status: JobStatus,
    message: str,
    end: AttemptEnd | None = None,
    failure_kind: str | None = None,
) -> Outcome:
    code, sig = (end.exit_code, end.signal) if end is not None else (None, None)
    return Outcome("finish", message, status, failure_kind, exit_code=code, signal=sig)


def _infra(end: AttemptEnd, infra: InfraFailure) -> Outcome:
    what = infra.what
    limit = end.max_infra_retries
    if end.infra_retries < (max_infra_retries() if limit is None else limit):
        if infra.source == "lost":
            text = (
                f"QUEUED: requeued after an infra failure ({what}); it restarts with the"
                " same id and checkpoint folder"
            )
        elif infra.source == "ray":
            text = f"QUEUED: Ray could not run it ({what}); resubmitted"
            text += " (failure_kind: infra, not its own code)"
        elif infra.source == "container":
            text = f"QUEUED: {what}; retried (failure_kind: infra, not its own code)"
        elif infra.source == "nccl":
            text = (
                f"QUEUED: collective communication failed ({what}); retried after a deep"
                f" preflight of its GPUs (failure_kind: infra, {NCCL_MARK})"
            )
        else:
            text = (
                f"QUEUED: {what}; GPU cordoned, the job restarts on healthy GPUs"
                " (failure_kind: infra, not its own code)"
            )
        return Outcome("requeue", text, kind="infra")
    if infra.source == "lost":
        text = (
            f"FAILED (infra): {what}; infra retries spent. Next: check `air doctor`, then relaunch"
        )
    elif infra.source == "ray":
        text = (
            f"FAILED (infra): Ray could not run the job ({what})."
            f" Next: read `air logs {end.job_id}` and check the cluster (`ray status`),"
            " then relaunch"
        )
        return Outcome("finish", text, JobStatus.FAILED, "infra", exit_code=end.exit_code)
    elif infra.source == "container":
        text = (
            f"FAILED (infra): {what}; infra retries spent."
            " Next: `air doctor` (it checks the container engine), then relaunch"
        )
    elif infra.source == "nccl":
        text = (
            f"FAILED (infra, {NCCL_MARK}): collective communication failed ({what});"
            " infra retries spent. Next: `air doctor --deep` (the all-reduce check), then"
            " relaunch"
        )
        return Outcome(
            "finish", text, JobStatus.FAILED, "infra", exit_code=end.exit_code, signal=end.signal
        )
    else:
        text = f"FAILED (infra): {what}; infra retries spent. Next: `air gpus` and `air doctor`"
    return Outcome("finish", text, JobStatus.FAILED, "infra")


def classify(end: AttemptEnd) -> Outcome:
    """The job's next state after ``end`` (see the module's table)."""
    if end.stop_request == "cancel":
        return _finish(JobStatus.CANCELLED, f"CANCELLED: {end.stop_reason}", end)
    if end.stop_request == "preempt":
        why = end.stop_reason or "preempted"
        text = f"QUEUED: {why}; it resumes with the same id and AIR_CHECKPOINT_DIR"
        return Outcome("requeue", text, kind="preempted")
    if end.infra is not None:
        return _infra(end, end.infra)
    if end.timed_out:
        text = (
            f"TIMED_OUT: ran past timeout_min={end.timeout_min} and was stopped."
            " Next: raise timeout_min or save checkpoints to AIR_CHECKPOINT_DIR and relaunch"
        )
        return _finish(JobStatus.TIMED_OUT, text, end, "user")
    if end.exit_code == 0:
        return _finish(JobStatus.SUCCEEDED, "SUCCEEDED: exited 0", end)
    if end.exit_code is not None:
        how = f"exited with code {end.exit_code}"
    else:
        how = f"was killed by {end.signal}"
    if end.rank is not None and end.rank_error:  # a gang: the failing rank's last words
        how += f" (its last error line: {end.rank_error!r}); the other ranks were stopped"
    rank = f"rank {end.rank} " if end.rank is not None else ""
    if end.user_retries < end.max_retries:
        text = f"QUEUED: {rank}{how}; retry {end.user_retries + 1} of {end.max_retries}"
        return Outcome("requeue", text, kind="user", exit_code=end.exit_code, signal=end.signal)
    where = f"; {end.runner}" if end.runner else ""
    subject = f"the command's rank {end.rank}" if rank else "the command"
    if end.refused_flag:  # the script takes no such flag: say which, and how to hand it over
        text = (
            f"FAILED: {subject} {how}: it refused the flag {end.refused_flag} that air appended"
            f" from the config (config_as: {end.config_as or 'both'}). Next: give the script"
            f" that flag (argparse: add_argument, or parse_known_args), or launch with"
            " config_as: file and read $AIR_CONFIG_FILE"
        )
        return _finish(JobStatus.FAILED, text, end, "user")
    text = (
        f"FAILED: {subject} {how} (its own code failed{where})."
        f" Next: read `air logs {end.job_id}`, fix it, relaunch"
    )
    return _finish(JobStatus.FAILED, text, end, "user")


def start_failed(kind: str, text: str, program: str) -> Outcome:
    """The command could not start (an OSError's class name and text): the user's to fix."""
    if kind == "JobFolderGone":  # runtime/execution/launch_env.py: not the command's fault
        message = f"FAILED: {text}. Next: relaunch the job"
        return Outcome("finish", message, JobStatus.FAILED, "user")
    if kind == "DataRefusedAtStart":  # a data input moved outside AIR_DATA_ROOTS since launch
        message = (
            f"FAILED: {text}. Next: put the data back under the allowed roots (AIR_DATA_ROOTS),"
            " then relaunch"
        )
        return Outcome("finish", message, JobStatus.FAILED, "user")
    if kind == "NotRegularFile":  # home.py: a FIFO, device or folder put in a job file's place
        message = (
            f"FAILED: {text}: something replaced a file air wrote in the job's folder."
            " Next: relaunch the job (a new folder), and find what writes into job folders"
        )
        return Outcome("finish", message, JobStatus.FAILED, "user")
    if kind == "SandboxUnavailable":  # runtime/execution/sandbox/
        message = (
            f"FAILED: {text}. Next: install bubblewrap (apt-get install bubblewrap), or relaunch"
            " with sandbox: auto or off"
        )
        return Outcome("finish", message, JobStatus.FAILED, "infra")
    if kind == "FileNotFoundError":
        message = (
            f"FAILED: command not found: {program!r}."
            " Next: check the program name and PATH, then relaunch"
        )
        code = 127
    elif kind == "PermissionError":
        message = (
            f"FAILED: permission denied running {program!r}."
            " Next: make it executable or run it through its interpreter"
        )
        code = 126
    else:
        message = f"FAILED: {text or kind}. Next: fix the job's command or workdir"
        code = 126
    return Outcome("finish", message, JobStatus.FAILED, "user", exit_code=code)
