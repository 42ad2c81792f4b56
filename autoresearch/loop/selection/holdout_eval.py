"""The held-out evaluation command (``objective.holdout.command``): run after a final
re-evaluation run succeeds, on that run's checkpoint folder, like the trusted evaluator.

It runs from the base snapshot's code in a code study (never the trial's), else from the
study's workdir; in a sandbox of its own (the run's folder and the held-out data read-only,
only its scratch folder writable, AIR_HOME hidden); with ``AIR_EVAL_SPLIT=test`` and the
held-out inputs as ``$AIR_DATA_DIR/<name>``. Its ``---`` block gives the held-out metric.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from air_skills.runtime.results.summary_block import parse_summary
from autoresearch.loop.evaluate import OUTPUT_TAIL, Evaluation, _run, evaluator_env
from autoresearch.loop.trials import study_sandbox, trial_command
from autoresearch.spec.study_schema import Study


def _wrapped(
    study: Study, command: list[str], job_dir: Path, work: Path, cwd: Path, data: list[str]
) -> list[str]:
    from air_skills.runtime.execution import sandbox

    if study_sandbox(study) == "off" or sandbox.unavailable() is not None:
        return command
    bwrap = sandbox.bwrap_path()
    assert bwrap is not None
    return sandbox.wrap(
        command,
        bwrap=bwrap,
        home=job_dir.parent.parent,
        jdir=work,
        cwd=str(cwd),
        readonly=[str(job_dir), *data],
        die_with_parent=True,
    )


def run_holdout(
    study: Study,
    job_dir: Path,
    config: dict[str, Any],
    scratch: Path,
    base: Any = None,
    study_dir: Path | None = None,
) -> Evaluation:
    """The held-out metric of the run in ``job_dir``, or why there is none."""
    holdout = study.objective.holdout
    assert holdout is not None and holdout.command
    study_dir = study_dir or scratch.parent
    scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="holdout-", dir=scratch))
    started = time.monotonic()
    try:
        cwd = base.build_base_view(work / "code") if base is not None else Path(study.workdir)
        links = work / "data"
        links.mkdir()
        real = []
        for d in holdout.data:  # $AIR_DATA_DIR/<name>, as a job gets its inputs
            path = os.path.realpath(os.path.join(study.workdir, d.path))
            real.append(path)
            (links / d.name).symlink_to(path)
        env = {
            **evaluator_env(work, config, job_dir, study_dir, study.env),
            "AIR_DATA_DIR": str(links),
            "AIR_EVAL_SPLIT": "test",
        }
        timeout_s = holdout.timeout_min * 60
        try:
            command = _wrapped(study, trial_command(holdout.command), job_dir, work, cwd, real)
            done = _run(command, cwd, env, scratch, study_dir, timeout_s)
        except subprocess.TimeoutExpired:
            return Evaluation(
                problem=f"the held-out evaluation ran past {holdout.timeout_min:g} min"
            )
        except OSError as exc:
            return Evaluation(problem=f"the held-out evaluation could not start: {exc}")
        output = (done.stdout + done.stderr).decode("utf-8", "replace")
        metrics, _ = parse_summary(done.stdout.decode("utf-8", "replace"))
        out = Evaluation(metrics, None, output[-OUTPUT_TAIL:], time.monotonic() - started)
        if done.returncode != 0:
            out.problem = f"the held-out evaluation exited with code {done.returncode}"
        elif holdout.metric not in metrics:
            out.problem = (
                f"the held-out evaluation printed no {holdout.metric!r} in a `---` summary"
                f" block; it printed: {', '.join(sorted(metrics)) or 'no summary block'}"
            )
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
