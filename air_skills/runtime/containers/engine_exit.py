"""What a container job's engine exit means: the engine's own error, or the image's command.

Stdlib only. ``<engine> run`` exits 125, 126 or 127 both when the engine failed and when the
command could not run; the container's state (never started) and the engine's error line in
the job's log tell them apart, and the message quotes that line.
"""

from __future__ import annotations

import os
import subprocess

from air_skills.home import open_job_file
from air_skills.runtime.containers import engine_config
from air_skills.runtime.containers.container import (
    QUICK_S,
    ContainerJob,
    _call,
    container_name,
    remove,
)
from air_skills.runtime.results.outcomes import InfraFailure, Outcome
from air_skills.status import JobStatus

# Exit codes of `<engine> run` itself: 125 the engine failed, 126 the command could not be
# invoked, 127 it was not found. The job's own code may exit with them too: never_started tells.
ENGINE_EXITS = (125, 126, 127)
TAIL_BYTES = 16384


def never_started(job: ContainerJob, job_id: str) -> bool:
    """Whether the job's container was created but its command never ran (an engine exit)."""
    argv = [job.engine, "inspect", "--format", "{{.State.Status}}", container_name(job_id)]
    try:
        done = _call(argv, QUICK_S, env=job.engine_env)
    except (OSError, subprocess.TimeoutExpired):
        return True
    if done.returncode != 0:  # no container at all: `run` failed before creating it
        return True
    return done.stdout.strip() in ("created", "configured", "initialized")


def after_exit(
    job: ContainerJob, job_id: str, rc: int, program: str, log_path: str | None = None
) -> InfraFailure | Outcome | None:
    """Remove the ended container; what an engine exit means (None: the job's own exit).

    The command not found or not runnable (the engine's line says so) is the job's: FAILED,
    user. Any other engine failure is the engine's, quoted: a known fault of its settings
    (engine_config.py) fails at once (a retry would meet it again), an unknown one is infra.
    """
    fault = rc in ENGINE_EXITS and never_started(job, job_id)
    remove(job.engine, job_id, env=job.engine_env)
    if not fault:
        return None
    line = engine_config.error_line(_tail(log_path))
    if (line and engine_config.command_missing(line)) or (not line and rc == 127):
        missing = "has no command" if rc == 127 else "cannot run the command"
        said = f": {line}" if line else ""
        message = (
            f"FAILED: the image {job.image} {missing} {program!r} (exit {rc} from"
            f" {job.engine}{said}). Next: check the command against the image (its PATH),"
            " then relaunch"
        )
        return Outcome("finish", message, JobStatus.FAILED, "user", exit_code=rc)
    said = line or "no error line in the log"
    if engine_config.match(line) is not None:
        fixes = ", ".join(job.fixes) or "none"
        message = (
            f"FAILED: the container engine {job.engine} could not start the container (exit"
            f" {rc}): {said} (engine settings applied by air: {fixes}). Next: run `air doctor`"
            " (it runs a container and applies the settings this engine needs), then relaunch"
        )
        return Outcome("finish", message, JobStatus.FAILED, "infra", exit_code=rc)
    what = f"the container engine {job.engine} failed to run the container (exit {rc}): {said}"
    return InfraFailure(what, "container")


def _tail(log_path: str | None) -> str:
    if not log_path:
        return ""
    try:
        with os.fdopen(open_job_file(log_path), "rb") as f:  # never waits on a FIFO
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            return f.read(TAIL_BYTES).decode("utf-8", "replace")  # grown since: not past it
    except OSError:
        return ""
