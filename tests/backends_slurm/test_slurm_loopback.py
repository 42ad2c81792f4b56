"""Issue 37.14: the single-node Slurm the suite starts listens on 127.0.0.1 only (slurmctld
and slurmd listened on 0.0.0.0), with a job running (its slurmstepd too)."""

from __future__ import annotations

import subprocess

import pytest
from helpers import wait_until
from listening import beyond_loopback, listening, process_tree

from air_skills.testing.slurm_cluster import LocalSlurmCluster

pytestmark = pytest.mark.slow


def test_the_controller_and_the_node_listen_on_loopback_only(slurm: LocalSlurmCluster) -> None:
    pids = [int((slurm.root / f"{d}.pid").read_text()) for d in ("slurmctld", "slurmd")]
    done = subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 60"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    job = done.stdout.strip().split(";")[0]
    try:
        state = ["squeue", "-h", "-j", job, "-o", "%T"]
        wait_until(
            lambda: (
                subprocess.run(state, capture_output=True, text=True).stdout.strip() == "RUNNING"
            ),
            timeout_s=60,
        )
        tree = process_tree(*pids)  # slurmstepd and the job are the node daemon's children
        assert len(listening(tree)) >= 2
        assert not beyond_loopback(tree)
    finally:
        subprocess.run(["scancel", job], capture_output=True)
