"""The README's `air logs JOB --grep ...` example matches what the bundled tinygpt prints (issue
38.9): run through the real `air` CLI, a real job, the pattern read from the README itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
AIR = [sys.executable, "-m", "air_skills.cli"]


def air(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AIR, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_readme_grep_example_matches_tinygpt_output(air_home: Path) -> None:
    readme = (REPO / "README.md").read_text()
    found = re.search(r"air logs JOB --grep '([^']+)'", readme)
    assert found, "the README shows `air logs JOB --grep '...'`"
    # `python` as the README's reader has it: the venv's, first on PATH
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "AIR_SANDBOX": "off", "PATH": path}
    launched = air(
        "launch", "--json", "--set", "steps=20", "--set", "eval_every=10",
        "--set", "eval_batches=1", "--", "python", "examples/tinygpt/train.py",
        env=env,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job = json.loads(launched.stdout)["job_id"]
    waited = air("wait", job, "--json", "--timeout", "240", env=env)
    assert json.loads(waited.stdout)[0]["status"] == "SUCCEEDED", waited.stdout
    grep = air("logs", job, "--grep", found.group(1), env=env)
    assert grep.returncode == 0, grep.stderr
    lines = [x for x in grep.stdout.splitlines() if "val_loss" in x]
    assert len(lines) >= 2, grep.stdout  # the evaluations' lines and the summary's
