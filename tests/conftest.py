"""Shared fixtures: a fresh AIR_HOME per test, simulated GPUs, fast grace periods."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


@pytest.fixture(autouse=True)
def _tmp_path_readable(request: pytest.FixtureRequest) -> None:
    """pytest makes tmp_path 0700: as root, a sandboxed job runs as AIR_SANDBOX_UID, which must
    read the scripts and folders a test puts there, as it would a user's 0755 project."""
    if "tmp_path" in request.fixturenames:
        request.getfixturevalue("tmp_path").chmod(0o755)


# `make test` runs the suite on pytest-xdist workers. Every test has its own AIR_HOME, temp
# folder and free ports; what the machine shares runs on one worker, one test after the other:
# the Ray head and the Slurm cluster (session fixtures: one per worker that runs their tests,
# never two at once: Ray's metrics ports are fixed, two single-node Slurms would share the
# host's node name) and podman's store (the container tests' teardown removes every air
# container). A test module is the unit of work otherwise (its module fixtures made once).
# (A scheduler of our own: xdist's loadgroup marks by nodeid suffix, which pytest 9 ignores.)
SHARED = {
    "tests/backends_ray/": "ray",
    "tests/backends_slurm/": "slurm",
    "tests/air_skills/execution/test_container": "podman",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class SharedFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return next((g for p, g in SHARED.items() if module.startswith(p)), module)

    return SharedFirst(config, log)


@pytest.fixture
def air_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh AIR_HOME with 4 simulated GPUs; every job left running is killed at the end."""
    home = tmp_path / "air_home"
    monkeypatch.setenv("AIR_HOME", str(home))
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "4")
    monkeypatch.setenv("AIR_GRACE_S", "2")
    monkeypatch.setenv("AIR_HEALTH_INTERVAL_S", "0.2")
    # Idle supervisors of a test's home wait a short while only: every test has its own home.
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "3")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("AIR_SIMULATED_GPU_FAULTS", raising=False)
    monkeypatch.delenv("AIR_PROJECT", raising=False)
    monkeypatch.delenv("AIR_DATA_ROOTS", raising=False)
    # Sandboxed jobs share the user's caches (sandbox_caches.py): a test's own, never root's.
    monkeypatch.setenv("AIR_SANDBOX_CACHE", str(tmp_path / "user-cache"))
    yield home
    _kill_leftovers(home)


@pytest.fixture
def client(air_home: Path):
    from air_skills import Client

    return Client(air_home)


def _kill_leftovers(home: Path) -> None:
    import signal
    import sqlite3

    db = home / "air.db"
    if not db.exists():
        return
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT supervisor_pid, job_pid FROM jobs WHERE status IN ('RUNNING','QUEUED')"
        ).fetchall()
    except sqlite3.Error:
        rows = []
    finally:
        conn.close()
    for sup, job in rows:
        for pid, group in ((job, True), (sup, False)):
            if not pid:
                continue
            try:
                if group:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs, for full-disk tests (skipped where mounting needs root we lack)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
