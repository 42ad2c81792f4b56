"""The trusted evaluator: a study's ``evaluate`` command, run after a trial succeeds, from the
base snapshot's code (never the trial's), with the trial's ``AIR_CHECKPOINT_DIR``.

Its last ``---`` summary block gives the objective. It runs as the loop's child, in a fresh
copy of the base code under the study folder, in its own process group that dies with the loop
(``evaluator_boot``) and is killed at ``evaluate.timeout_min``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.runtime.execution.job_env import job_environment
from air_skills.runtime.execution.launch_env import user_env
from air_skills.runtime.results.summary_block import parse_summary
from autoresearch.code.code_base import CodeBase
from autoresearch.loop.evaluator_boot import MARKER, boot_command, record
from autoresearch.loop.trials import study_sandbox, trial_command
from autoresearch.spec.study_schema import Study

OUTPUT_TAIL = 4000


@dataclass
class Evaluation:
    metrics: dict[str, float] = field(default_factory=dict)
    problem: str | None = None  # why no objective came out
    output: str = ""
    seconds: float = 0.0
    tampered: list[str] = field(default_factory=list)  # protected files whose blob was bad


def _run(
    command: list[str], cwd: Path, env: dict[str, str], scratch: Path, study_dir: Path,
    timeout_s: float,
) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """The evaluator in its own process group, dying with this process (evaluator_boot),
    recorded in ``scratch`` while it runs; the whole group is killed at the timeout."""
    proc = subprocess.Popen(
        boot_command(command),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    running = record(scratch, proc.pid, study_dir)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        running.unlink(missing_ok=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what it left behind in its group
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def evaluator_env(
    work: Path, config: dict[str, Any], job_dir: Path, study_dir: Path, study_env: dict[str, str]
) -> dict[str, str]:
    """An evaluation run's environment: job_env's allow-list and the study's ``env`` (its
    reserved names dropped, as from a trial's spec env), as a trial's (never the loop's
    AIR_MCP_TOKEN or LLM keys), the trial's checkpoints and folder, and its config written to
    ``work/config.json``."""
    cfg = work / "config.json"
    cfg.write_text(json.dumps(config))
    return {
        **job_environment(os.environ),
        **user_env(study_env),
        "AIR_CHECKPOINT_DIR": str(job_dir / "checkpoints"),
        "AIR_CONFIG_FILE": str(cfg),
        "AIR_TRIAL_JOB_DIR": str(job_dir),
        MARKER: str(study_dir),
    }


def _corrupt_protected(base: CodeBase, view: Path) -> list[str]:
    """Protected files whose materialised bytes do not hash to their content address; each
    one's blob is quarantined (air_skills/runtime/code/quarantine.py)."""
    from air_skills.runtime.code.quarantine import quarantine

    bad = []
    for path, sha in sorted(base.protected.items()):
        try:
            with open(view / path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            digest = None
        if digest != sha:
            bad.append(path)
            quarantine(base.home, sha)
    return bad


def _sandboxed(study: Study, command: list[str], job_dir: Path, work: Path, cwd: Path) -> list[str]:
    """The evaluator in a sandbox of its own (unless the study turned sandboxes off): the
    trial's folder read-only, only its scratch folder writable, AIR_HOME hidden."""
    from air_skills.runtime.execution import sandbox

    if study_sandbox(study) == "off" or sandbox.unavailable() is not None:
        return command
    bwrap = sandbox.bwrap_path()
    assert bwrap is not None
    return sandbox.wrap(  # _run boots it: bwrap dies with the loop, its child with it
        command,
        bwrap=bwrap,
        home=job_dir.parent.parent,
        jdir=work,
        cwd=str(cwd),
        readonly=[str(job_dir)],
        die_with_parent=True,
    )


def evaluate(
    base: CodeBase,
    study: Study,
    job_dir: Path,
    config: dict[str, Any],
    scratch: Path,
    study_dir: Path | None = None,
) -> Evaluation:
    """Run the evaluator on the checkpoints in ``job_dir``; the objective or why not."""
    assert study.evaluate is not None
    import time

    study_dir = study_dir or scratch.parent
    scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="eval-", dir=scratch))
    started = time.monotonic()
    try:
        cwd = base.build_base_view(work / "code")
        corrupt = _corrupt_protected(base, work / "code")
        if corrupt:  # the store's copy was rewritten: never run it
            return Evaluation(
                problem="tampered: the store's copy of protected "
                + ", ".join(corrupt)
                + " does not hash to its content address (blob quarantined; see air doctor)",
                tampered=corrupt,
            )
        env = evaluator_env(work, config, job_dir, study_dir, study.env)
        try:
            command = _sandboxed(study, trial_command(study.evaluate.command), job_dir, work, cwd)
            done = _run(command, cwd, env, scratch, study_dir,
                        study.evaluate.timeout_min * 60)  # fmt: skip
        except subprocess.TimeoutExpired:
            return Evaluation(problem=f"the evaluator ran past {study.evaluate.timeout_min:g} min")
        except OSError as exc:
            return Evaluation(problem=f"the evaluator could not start: {exc}")
        if done.returncode == 127 and b"the evaluator could not start" in done.stderr:
            return Evaluation(problem=done.stderr.decode("utf-8", "replace").strip()[-500:])
        output = (done.stdout + done.stderr).decode("utf-8", "replace")
        metrics, _ = parse_summary(done.stdout.decode("utf-8", "replace"))
        out = Evaluation(metrics, None, output[-OUTPUT_TAIL:], time.monotonic() - started)
        metric = study.objective.metric
        if done.returncode != 0:
            out.problem = f"the evaluator exited with code {done.returncode}"
        elif metric not in metrics:
            out.problem = (
                f"the evaluator printed no objective {metric!r} in a `---` summary block; it"
                f" printed: {', '.join(sorted(metrics)) or 'no summary block'}"
            )
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
