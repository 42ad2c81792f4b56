"""One real single-node Slurm cluster (munge, slurmctld, slurmd) for the Slurm suite: 2 CPUs,
4 count-only GPUs. Skipped, saying why, where Slurm cannot run (not installed, not root)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from air_skills.testing.slurm_cluster import LocalSlurmCluster, missing


@pytest.fixture(scope="session")
def slurm() -> Iterator[LocalSlurmCluster]:
    why = missing()
    if why:
        pytest.skip(why)
    cluster = LocalSlurmCluster(gpus=4, cpus=2)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_client(slurm: LocalSlurmCluster, air_home: Path, monkeypatch: pytest.MonkeyPatch):
    """A Client over a fresh home whose jobs go to the cluster by default."""
    from air_skills import Client

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    client = Client(air_home)
    client.store.set_setting("backend", "slurm")
    return client
