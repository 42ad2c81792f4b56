"""A gang that hangs in a collective: every rank's stack is taken, the job is retried once as
infra, then failed once the retry budget is spent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.home import job_dir

pytest.importorskip("torch")

PY = sys.executable

# Rank 1 sleeps before its all_reduce; rank 0 waits in it for a peer that never comes.
# torch's import and the rendezvous run in a declared phase: on a loaded machine they take
# longer than the 12 s stall timeout, and a rank stalled in its import is no collective wait.
HANG = """
import os, sys, time
sys.path.insert(0, {repo!r})
from air_skills.job import phase
with phase("startup", expect_min=5):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {{rank}} ready", flush=True)
if rank == 1:
    time.sleep(600)
dist.all_reduce(torch.ones(1))
"""
REPO = Path(__file__).resolve().parents[3]


def test_gang_hung_in_all_reduce_is_retried_as_infra_then_failed(client: Client) -> None:
    code = HANG.format(repo=str(REPO))
    spec = JobSpec(command=[PY, "-c", code], procs=2, cpus=2, track=False, stall_timeout_min=0.2)
    info = client.launch(spec)
    # The wait returns at the first stall, which is retried: the job runs again.
    first = client.wait([info.job_id], timeout_s=240)[0]
    assert first.status in (JobStatus.QUEUED, JobStatus.RUNNING), first.message
    assert "QUEUED: stalled" in first.message and "reason: stalled" in first.message
    done = client.wait([info.job_id], timeout_s=240)[0]
    assert done.status == JobStatus.FAILED, done.message
    assert done.failure_kind == "infra", done.message
    assert done.attempts == 2  # retried once, then the stall retry budget was spent
    assert "reason: stalled" in done.message and "stall retries spent" in done.message
    assert "rank 0 in all_reduce (distributed_c10d.py" in done.message
    assert "rank 1 in <string>:11 <module>()" in done.message
    stacks = (job_dir(client.home, info.job_id) / "stacks.txt").read_text()
    assert "=== rank 0, pid" in stacks and "=== rank 1, pid" in stacks
    assert "all_reduce" in stacks and "<module> (<string>:11)" in stacks
    events = client.store.events(info.job_id)
    assert any(e["kind"] == "requeued-infra" and "QUEUED: stalled" in e["message"] for e in events)
