"""The trusted evaluator: a study's ``evaluate`` command, run after a trial succeeds, from the
base snapshot's code (never the trial's), with the trial's ``AIR_CHECKPOINT_DIR``.

Its last ``---`` summary block gives the objective. It runs in the loop's process, in a fresh
copy of the base code under the study folder, and is killed at ``evaluate.timeout_min``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.runtime.results.summary_block import parse_summary
from autoresearch.code.code_base import CodeBase
from autoresearch.loop.trials import trial_command
from autoresearch.spec.study_schema import Study

OUTPUT_TAIL = 4000


@dataclass
class Evaluation:
    metrics: dict[str, float] = field(default_factory=dict)
    problem: str | None = None  # why no objective came out
    output: str = ""
    seconds: float = 0.0


def evaluate(
    base: CodeBase, study: Study, job_dir: Path, config: dict[str, Any], scratch: Path
) -> Evaluation:
    """Run the evaluator on the checkpoints in ``job_dir``; the objective or why not."""
    assert study.evaluate is not None
    import json
    import time

    scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="eval-", dir=scratch))
    started = time.monotonic()
    try:
        cwd = base.build_base_view(work / "code")
        cfg = work / "config.json"
        cfg.write_text(json.dumps(config))
        env = {
            **os.environ,
            "AIR_CHECKPOINT_DIR": str(job_dir / "checkpoints"),
            "AIR_CONFIG_FILE": str(cfg),
            "AIR_TRIAL_JOB_DIR": str(job_dir),
        }
        try:
            done = subprocess.run(
                trial_command(study.evaluate.command),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=study.evaluate.timeout_min * 60,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Evaluation(problem=f"the evaluator ran past {study.evaluate.timeout_min:g} min")
        except OSError as exc:
            return Evaluation(problem=f"the evaluator could not start: {exc}")
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
