"""A gang rank that changes MASTER_PORT before init_process_group (issue 30): every rank
arrives and none meets; the gang hung until timeout_min, then advised raising it. Now the
rendezvous watch fails it after AIR_RENDEZVOUS_TIMEOUT_S, naming the ranks that never met."""

from __future__ import annotations

import os
import sys
import uuid

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus

pytest.importorskip("torch")

PY = sys.executable

STRAY = """
import os, sys
import torch.distributed as dist
if os.environ["RANK"] == "1":
    os.environ["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)  # the attack
print("rank", os.environ["RANK"], "at port", os.environ["MASTER_PORT"], flush=True)
dist.init_process_group("gloo")
print("met", flush=True)
dist.destroy_process_group()
"""


def processes_with(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def test_ranks_that_arrive_and_never_meet_fail_the_gang_naming_them(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_RENDEZVOUS_TIMEOUT_S", "5")
    token = uuid.uuid4().hex
    spec = JobSpec(command=[PY, "-c", STRAY, token], procs=2, cpus=2, track=False,
                   timeout_min=30)  # fmt: skip
    info = client.launch(spec)
    info = client.wait([info.job_id], timeout_s=240)[0]
    assert info.status == JobStatus.FAILED, info.message
    assert info.failure_kind == "user"
    assert "rendezvous timed out after 5 s: ranks 0, 1 entered init_process_group" in info.message
    assert "never met the others" in info.message and "MASTER_PORT" in info.message
    assert "timeout_min" not in info.message  # not "raise timeout_min"
    wait_until(lambda: not processes_with(token), timeout_s=30)


def test_a_gang_that_meets_is_not_stopped(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_RENDEZVOUS_TIMEOUT_S", "2")
    honest = STRAY.replace('os.environ["RANK"] == "1"', "False")
    slow = honest.replace('print("met", flush=True)', 'import time; time.sleep(4); print("met")')
    info = client.launch(JobSpec(command=[PY, "-c", slow], procs=2, cpus=2, track=False))
    info = client.wait([info.job_id], timeout_s=240)[0]
    assert info.status == JobStatus.SUCCEEDED, info.message
    log = client.logs(info.job_id, tail=None).text
    assert "[rank0]: met" in log and "[rank1]: met" in log
