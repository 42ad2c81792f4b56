"""Outputs where the user looks (issue 38.6): what a job writes into its code view (./checkpoints,
./runs) is named in its JobInfo (`air status`, get_job) and kept by code GC, which still
removes the view of a job that wrote nothing there. Real jobs, real snapshots, real GC."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.code.code_gc import collect

WRITES = """
import os
os.makedirs("checkpoints", exist_ok=True)
open("checkpoints/last.pt", "w").write("weights")
os.makedirs("runs/exp1", exist_ok=True)
open("runs/exp1/events.out", "w").write("scalars")
"""


def run(client: Client, tmp_path: Path, name: str, source: str):
    tree = tmp_path / name
    tree.mkdir()
    (tree / "train.py").write_text(source)
    spec = JobSpec(command=[sys.executable, "train.py"], workdir=str(tree), track=False)
    info = client.wait([client.launch(spec).job_id], timeout_s=120)[0]
    assert info.status == JobStatus.SUCCEEDED, info.message
    return client.get(info.job_id)


def test_outputs_in_the_view_are_named_and_kept_by_gc(client: Client, tmp_path: Path) -> None:
    wrote = run(client, tmp_path, "wrote", WRITES)
    quiet = run(client, tmp_path, "quiet", "print('nothing written')\n")
    jdir = client.home / "jobs" / wrote.job_id
    view = jdir / "code"
    assert wrote.outputs == [
        str(jdir / "checkpoints"),  # AIR_CHECKPOINT_DIR first
        str(view / "checkpoints"),
        str(view / "runs"),
    ]
    assert quiet.outputs == [str(client.home / "jobs" / quiet.job_id / "checkpoints")]
    report = collect(client.home, now=time.time() + 40 * 86400)  # past the retention window
    assert report["views_removed"] == 1  # the quiet job's view only
    assert (view / "checkpoints" / "last.pt").read_text() == "weights"
    assert (view / "runs" / "exp1" / "events.out").exists()
    assert not (client.home / "jobs" / quiet.job_id / "code").exists()
