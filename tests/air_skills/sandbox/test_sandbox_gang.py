"""Issue 25: a torchrun gang runs whole in one sandbox: every rank sees the same view (one pid
namespace, where the other ranks are and the host's processes are not; the same read-only
filesystem) and each writes only into the job's folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")
PY = sys.executable

RANK = r"""
import json, os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
ckpt = os.environ["AIR_CHECKPOINT_DIR"]
open(os.path.join(ckpt, f"pid{dist.get_rank()}"), "w").write(str(os.getpid()))
dist.barrier()  # both pids written
other = open(os.path.join(ckpt, f"pid{1 - dist.get_rank()}")).read()
pids = [p for p in os.listdir("/proc") if p.isdigit()]
try:
    open(os.path.join(os.environ["AIR_HOME"], "air.db"), "rb")
    home = "readable"
except OSError as exc:
    home = type(exc).__name__
print("RANK " + json.dumps({"rank": dist.get_rank(), "sees_other": other in pids,
      "procs": len(pids), "air_db": home}), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_gang_runs_in_one_sandbox(client: Client, air_home: Path) -> None:
    info = client.launch(
        JobSpec(command=[PY, "-c", RANK], procs=2, cpus=2, track=False, code="live")
    )
    assert info.sandbox == "bwrap"
    done = client.wait([info.job_id], timeout_s=240)[0]
    text = client.logs(info.job_id, tail=None).text  # each rank's lines, prefixed [rankN]:
    assert done.status == JobStatus.SUCCEEDED, (done.message, text)
    lines = [line.split("RANK ", 1)[1] for line in text.splitlines() if "RANK {" in line]
    seen = {s["rank"]: s for s in map(json.loads, lines)}.values()
    assert sorted(s["rank"] for s in seen) == [0, 1], text
    for s in seen:
        assert s["sees_other"]  # one pid namespace for the whole gang
        assert s["procs"] < 10  # bwrap's init, torchrun, its ranks: not the host's processes
        assert s["air_db"] == "FileNotFoundError"  # AIR_HOME hidden for every rank
