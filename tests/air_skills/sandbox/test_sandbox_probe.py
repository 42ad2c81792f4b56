"""Issue 25: a launcher does not run bwrap to decide `auto` each time: a yes is remembered per
user while the bwrap program, the boot and the kernel's switches stay the same; a no never is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills.runtime.execution import sandbox

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")
ASK = "from air_skills.runtime.execution import sandbox; print(sandbox.unavailable())"


def _wrapper(folder: Path, body: str) -> Path:
    """A bwrap that notes each run in runs.txt beside it."""
    path = folder / "bwrap"
    path.write_text(f"#!/bin/sh\necho run >> {folder / 'runs.txt'}\n{body}\n")
    path.chmod(0o755)
    return path


def _ask(bwrap: Path, cache: Path) -> str:
    """A fresh process (a one-shot `air launch`) asks whether a sandbox can be made."""
    env = {**os.environ, "AIR_BWRAP": str(bwrap), "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", ASK], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _runs(folder: Path) -> int:
    runs = folder / "runs.txt"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_a_working_bwrap_is_probed_once_per_user_until_it_changes(tmp_path: Path) -> None:
    real = shutil.which(os.environ.get("AIR_BWRAP", "bwrap"))
    assert real is not None
    good = tmp_path / "good"
    good.mkdir()
    bwrap = _wrapper(good, f'exec {real} "$@"')
    cache = tmp_path / "cache"
    assert _ask(bwrap, cache) == "None" and _runs(good) == 1
    assert _ask(bwrap, cache) == "None" and _runs(good) == 1  # remembered: not run again
    assert (cache / "air-skills" / "sandbox-probe").exists()
    bwrap.write_text(bwrap.read_text() + "# changed\n")  # another program: asked again
    assert _ask(bwrap, cache) == "None" and _runs(good) == 2


def test_a_refusal_is_never_remembered(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    bwrap = _wrapper(bad, "echo 'bwrap: No permissions to create new namespace' >&2\nexit 1")
    cache = tmp_path / "cache"
    for n in (1, 2):
        assert "No permissions" in _ask(bwrap, cache)
        assert _runs(bad) == n  # asked each time: a machine fixed since is seen at once
