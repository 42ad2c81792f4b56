"""A full disk under AIR_HOME is said as such by `air`, naming the path, not as a generic
store error ("disk I/O error ... check that AIR_HOME is a local, writable folder").

The disk is a real, small tmpfs; mounting one needs root (tests run as root here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")


def air(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # No reserve (AIR_DISK_RESERVE_MB): these tests fill the disk for the write that fails.
    env = {**os.environ, "AIR_HOME": str(home), "AIR_SIMULATED_GPUS": "1"}
    env.setdefault("AIR_DISK_RESERVE_MB", "0")
    return subprocess.run([AIR, *args], capture_output=True, text=True, timeout=120, env=env)


def fill(disk: Path, leave_kib: int = 0) -> None:
    """Fill ``disk`` up to ``leave_kib`` KiB free."""
    st = os.statvfs(disk)
    size = max(0, st.f_bavail * st.f_frsize - leave_kib * 1024)
    with open(disk / "filler", "wb") as f:
        try:
            f.write(b"\0" * size)
        except OSError:
            pass  # full already


def test_full_disk_under_the_store_is_named(small_disk: Path) -> None:
    home = small_disk / "home"
    assert air(home, "ls").returncode == 0
    fill(small_disk)
    proc = air(home, "launch", "--", "true")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"[disk-full] the disk is full writing {home / 'air.db'}")
    assert f"Next: free space on the disk holding {home} (`df -h` shows it)" in proc.stderr
    error = json.loads(air(home, "ls", "--json").stdout)["error"]
    assert error["code"] == "disk-full" and error["context"]["path"] == str(home / "air.db")


def test_disk_filling_during_launch_is_named(small_disk: Path, tmp_path: Path) -> None:
    home = small_disk / "home"
    assert air(home, "ls").returncode == 0
    fill(small_disk, leave_kib=200)
    spec = tmp_path / "big.yaml"
    spec.write_text('command: ["true"]\ntrack: false\nconfig: {big: "' + "x" * 300_000 + '"}\n')
    proc = air(home, "launch", str(spec))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("[disk-full] the disk is full writing ")
    assert str(home) in proc.stderr.splitlines()[0]


def test_a_launch_under_the_reserve_is_refused_saying_what_gc_would_free(
    small_disk: Path,
) -> None:
    """Issue 37.10: air keeps AIR_DISK_RESERVE_MB for its own state: a job that filled the
    disk leaves air room for its records; a launch below it is refused, nothing made."""
    home = small_disk / "home"
    assert air(home, "ls").returncode == 0
    fill(small_disk, leave_kib=1024)  # 1 MiB free, under a 1.5 MB reserve
    env = {**os.environ, "AIR_HOME": str(home), "AIR_DISK_RESERVE_MB": "1.5"}
    proc = subprocess.run(
        [AIR, "launch", "--json", "--", "true"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "disk-full" and "AIR_DISK_RESERVE_MB" in error["message"]
    assert "`air gc` would free" in error["hint"] and error["context"]["path"] == str(home)
    assert not [p for p in os.listdir(home / "jobs") if p.startswith("job-")]
    assert json.loads(air(home, "ls", "--json").stdout) == []  # the store still answers


def test_under_the_reserve_the_refusal_says_what_the_gc_policy_frees_and_gc_frees_it(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41.6: finished jobs that the retention policy (AIR_GC_KEEP_JOBS) would remove
    are named in the refusal, and `air gc` removing them lets the launch through."""
    from air_skills import Client, JobSpec, JobStatus

    home = small_disk / "home"
    for name, value in (("AIR_HOME", str(home)), ("AIR_SIMULATED_GPUS", "1"),
                        ("AIR_DISK_RESERVE_MB", "0"), ("AIR_GC_KEEP_JOBS", "0")):  # fmt: skip
        monkeypatch.setenv(name, value)
    write = "import os; open(os.environ['AIR_CHECKPOINT_DIR'] + '/out', 'wb').write(b'x' * 400000)"
    client = Client(home)
    job = client.launch(JobSpec(command=[sys.executable, "-c", write], track=False, code="live"))
    (info,) = client.wait([job.job_id], timeout_s=120)
    assert info.status == JobStatus.SUCCEEDED, info.message
    fill(small_disk, leave_kib=1024)  # 1 MiB free, under a 1.2 MB reserve
    env = {**os.environ, "AIR_DISK_RESERVE_MB": "1.2"}
    launch = [AIR, "launch", "--json", "--code", "live", "--", "true"]
    proc = subprocess.run(launch, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr
    hint = json.loads(proc.stdout)["error"]["hint"]
    assert "`air gc` would free 0.4 MB (1 finished jobs by AIR_GC_KEEP_DAYS" in hint, hint
    gc = subprocess.run([AIR, "gc", "--json"], capture_output=True, text=True, env=env)
    assert json.loads(gc.stdout)["jobs"]["jobs_removed"] == 1, gc.stderr
    proc = subprocess.run(launch, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
