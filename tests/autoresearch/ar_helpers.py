"""Helpers for the autoresearch tests (a uniquely named module: `conftest` is ambiguous)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRIAL_SCRIPT = HERE / "trial_script.py"


def small_study(**overrides: Any) -> dict[str, Any]:
    """A study of the fast trial script, as a dict (tests change what they need)."""
    study: dict[str, Any] = {
        "name": "t",
        "command": [sys.executable, str(TRIAL_SCRIPT)],
        "workdir": str(HERE),
        "base_config": {"x": 0.0, "y": 0.0, "steps": 3, "sleep_s": 0.05},
        "search_space": {
            "x": {"type": "float", "low": -1.0, "high": 1.0},
            "y": {"type": "float", "low": -1.0, "high": 1.0},
        },
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 4, "concurrency": 2},
        "gpus_per_trial": 0,
        "proposer": "random",
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(study.get(key), dict) and key != "search_space":
            study[key] = {**study[key], **value}
        else:
            study[key] = value
    return study


def start_loop(
    study_file: Path,
    folder: Path,
    *,
    crash_at: str | None = None,
    poll_s: float = 0.2,
    resume: bool = False,
    **env: str,
) -> subprocess.Popen[bytes]:
    """`autoresearch run` as its own process; ``crash_at`` names the journal event right after
    which it kills itself with SIGKILL (AIR_TEST_CRASH_AT); ``resume`` continues the study in
    ``folder``; ``env`` adds variables."""
    extra = {**env, **({"AIR_TEST_CRASH_AT": crash_at} if crash_at else {})}
    cmd = [sys.executable, "-m", "autoresearch.cli", "run", str(study_file), "--dir", str(folder)]
    return subprocess.Popen(
        [*cmd, "--poll-s", str(poll_s), *(["--resume"] if resume else [])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, **extra},
    )
