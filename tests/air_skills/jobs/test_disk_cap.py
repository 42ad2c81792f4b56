"""Issue 37.10: a job's disk cap (spec ``disk_gb``, AIR_JOB_DISK_GB). Its supervisor counts the
blocks its folder holds (checkpoints included; a sparse file counts what it holds; no link is
followed) and stops a job past its cap, FAILED with the reason, never retried."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.supervision.disk_cap import folder_bytes

PY = sys.executable
WRITER = r"""
import os, time
path = os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "big.bin")
with open(path, "wb") as f:
    for _ in range(20):  # 20 MB, each MB on the disk before the next
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
print("wrote 20 MB", flush=True)
time.sleep(120)
"""
SPARSE = r"""
import os
path = os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "sparse.bin")
with open(path, "wb") as f:
    f.truncate(2 << 30)  # 2 GiB long, nothing in it
    f.write(os.urandom(1 << 20))
    os.fsync(f.fileno())
print("sparse done", flush=True)
"""


def test_a_job_past_its_disk_cap_is_stopped_and_says_why(client: Client) -> None:
    spec = JobSpec(command=[PY, "-c", WRITER], track=False, disk_gb=0.01, max_retries=2)
    info = client.launch(spec)
    done = client.wait([info.job_id], timeout_s=90)[0]
    assert done.status == JobStatus.FAILED, done.message
    assert "disk: wrote past its cap of 0.01 GB" in done.message
    assert "checkpoints included" in done.message and "Next:" in done.message
    assert client.store.row(info.job_id).attempts == 1  # not retried: it would write again
    # Stopped by the cap, not by itself: it sleeps 120 s after writing, past the wait. The cap
    # may stop it before it prints "wrote 20 MB" (the tick can come mid-write), so that line is
    # not asserted.


def test_the_cap_counts_blocks_and_the_setting_applies(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_JOB_DISK_GB", "0.01")  # the launch's setting, as its spec's
    info = client.launch(JobSpec(command=[PY, "-c", SPARSE], track=False))
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message  # 2 GiB long, 1 MB held
    capped = client.launch(JobSpec(command=[PY, "-c", WRITER], track=False))
    ended = client.wait([capped.job_id], timeout_s=90)[0]
    assert ended.status == JobStatus.FAILED and "cap of 0.01 GB" in ended.message


def test_the_count_follows_no_link_and_counts_a_file_once(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(4 << 20))
    jdir = tmp_path / "job"
    (jdir / "checkpoints").mkdir(parents=True)
    (jdir / "checkpoints" / "own").write_bytes(os.urandom(1 << 20))
    os.link(jdir / "checkpoints" / "own", jdir / "again")  # the same blocks, twice named
    (jdir / "to-file").symlink_to(outside / "big")
    (jdir / "to-dir").symlink_to(outside)
    used = folder_bytes(jdir)
    assert (1 << 20) <= used < (2 << 20)
    assert folder_bytes(tmp_path / "missing") == 0


TMP_WRITER = r"""
import errno, os
try:
    with open("/tmp/big.bin", "wb") as f:
        for _ in range(20):
            f.write(os.urandom(1 << 20))
            f.flush()
    print("tmp took 20 MB", flush=True)
except OSError as exc:
    print("tmp full" if exc.errno == errno.ENOSPC else f"tmp error {exc}", flush=True)
"""


def test_a_sandboxed_jobs_tmp_is_sized_as_its_cap(client: Client) -> None:
    from air_skills.runtime.execution import sandbox

    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    spec = JobSpec(command=[PY, "-c", TMP_WRITER], track=False, disk_gb=0.01, sandbox="on")
    info = client.launch(spec)
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "tmp full" in client.logs(info.job_id).text  # its /tmp is a 10 MB tmpfs
