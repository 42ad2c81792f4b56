"""The end-of-job re-check of data inputs is bounded: metadata first, content within a budget.

A data input swapped for a huge (sparse) file during a job must not keep the job's supervisor
reading it: the job ends promptly and its message says the input changed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from helpers import GATED, open_gate

from air_skills import Client, JobSpec, JobStatus
from air_skills.tracking.fingerprint import Budget, fingerprint, recheck

PY = sys.executable
HUGE = 100 << 30  # 100 GiB, sparse: no disk used, but minutes to hash whole


def age(path: Path, seconds: float = 3600) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, air_home: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "shard.bin").write_bytes(b"x" * 4096)
    age(root / "shard.bin")
    monkeypatch.setenv("AIR_DATA_ROOTS", str(root))
    return root


def test_input_swapped_for_a_huge_file_ends_the_job_promptly(data: Path, client: Client) -> None:
    shard = data / "shard.bin"
    spec = JobSpec(
        command=[PY, "-c", GATED],  # runs until the input is swapped (a fixed sleep may not)
        data=[{"name": "shard", "path": str(shard)}],
        gpus=1,
        track=False,
    )
    info = client.launch(spec)
    deadline = time.monotonic() + 60
    while client.get(info.job_id).status != JobStatus.RUNNING:
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    swapped = data / "swap.bin"
    with open(swapped, "wb") as f:
        f.truncate(HUGE)
    os.replace(swapped, shard)
    swapped_at = time.monotonic()
    open_gate(client.home / "jobs" / info.job_id)

    # Reading 100 GiB takes minutes; a bounded re-check answers within seconds of the job's end.
    while True:
        job = client.get(info.job_id)
        if job.status.is_terminal() and "data inputs" in job.message:
            break
        assert time.monotonic() - swapped_at < 30, f"still re-checking: {job.status} {job.message}"
        time.sleep(0.1)
    assert job.status == JobStatus.SUCCEEDED, job.message
    assert "data inputs changed during the job: shard changed (size/mtime)" in job.message
    assert not [g for g in client.gpus() if g.job_ids]  # its GPU is free


def test_recheck_reads_metadata_first_and_content_within_its_budget(
    data: Path, air_home: Path
) -> None:
    shard = data / "shard.bin"
    before = fingerprint(shard, air_home).digest
    nothing = Budget.of(0, 5)  # no content may be read

    # Same metadata as at launch: unchanged, without reading a byte.
    assert recheck(str(shard), air_home, before, nothing).state == "same"

    # Same size, new content and mtime: too large to read within the budget -> metadata says.
    shard.write_bytes(b"y" * 4096)
    age(shard, 60)
    assert recheck(str(shard), air_home, before, Budget.of(0, 5)).state == "meta-changed"
    # Within the budget the content is read, as before: a new digest.
    result = recheck(str(shard), air_home, before, Budget.of(1 << 20, 5))
    assert result.state == "changed" and result.digest == fingerprint(shard).digest

    # Only touched: the content is read again and found the same.
    age(shard, 30)
    now = fingerprint(shard, air_home).digest
    age(shard, 20)
    assert recheck(str(shard), air_home, now, Budget.of(1 << 20, 5)).state == "same"

    # No launch metadata (fingerprinted without a home) and no budget: said, not guessed.
    other = data / "other.bin"
    other.write_bytes(b"z" * 4096)
    age(other)
    digest = fingerprint(other).digest
    assert recheck(str(other), air_home, digest, Budget.of(0, 5)).state == "unchecked"


def test_folder_recheck_sees_an_added_file_from_metadata(data: Path, air_home: Path) -> None:
    folder = data / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    age(folder / "a.txt")
    before = fingerprint(folder, air_home).digest
    assert recheck(str(folder), air_home, before, Budget.of(0, 5)).state == "same"
    (folder / "b.txt").write_text("beta\n")
    assert recheck(str(folder), air_home, before, Budget.of(0, 5)).state == "meta-changed"
    assert recheck(str(folder), air_home, before, Budget.of(1 << 20, 5)).state == "changed"
