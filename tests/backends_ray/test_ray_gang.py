"""Gangs on Ray: two nodes on 127.0.0.1 (the suite's head plus a second raylet, fake GPUs)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from air_skills.errors import InsufficientGpus
from air_skills.models import JobStatus

# Each starts a real Ray head (or uses the session's): end-to-end, minutes in all.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")
PY = sys.executable

ALLREDUCE = """\
import os, sys, time
from pathlib import Path
import torch, torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1) * (rank + 1)
dist.all_reduce(t)
print(f"rank {rank}/{os.environ['WORLD_SIZE']} node {os.environ['AIR_NODE_RANK']}"
      f" of {os.environ['AIR_NUM_NODES']} ips {os.environ['AIR_NODE_IPS']} sum {t.item()}",
      flush=True)
release = Path(sys.argv[1]) if len(sys.argv) > 1 else None
while release is not None and not release.exists():  # held until the test says
    time.sleep(0.1)
dist.destroy_process_group()
"""


@pytest.fixture
def two_nodes(ray_head: Any) -> Iterator[Any]:
    """The suite's head (4 GPUs) plus a second node with 1 GPU, for one test."""
    from air_skills.testing.ray_node import LocalRayNode

    with LocalRayNode(ray_head, num_gpus=1, num_cpus=2) as node:
        yield node


def gang(client: Any, wd: Path, *args: str, **spec: Any) -> Any:
    (wd / "allreduce.py").write_text(ALLREDUCE)
    return client.launch(
        {"command": [PY, "allreduce.py", *args], "workdir": str(wd), "backend": "ray",
         "track": False, "nodes": 2, "gpus": 1, "cpus": 1, **spec}
    )  # fmt: skip


@pytest.mark.slow
def test_two_node_gloo_job(ray_client: Any, workdir: Path, two_nodes: Any) -> None:
    info = gang(ray_client, workdir)
    done = ray_client.wait([info.job_id], timeout_s=180)[0]
    log = ray_client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    # Each node ran one rank; both know the two nodes' addresses (node 0's is the rendezvous).
    # (Two raylets on one host share its log folder, so Ray may forward a line twice.)
    ips = r"ips ([0-9.]+,[0-9.]+)"
    zero = re.search(r"\[rank0\]: rank 0/2 node 0 of 2 " + ips + " sum 3.0", log)
    one = re.search(r"\[rank1\]: rank 1/2 node 1 of 2 " + ips + " sum 3.0", log)
    assert zero and one and zero.group(1) == one.group(1), log
    ranks = [line for line in log.splitlines() if "[rank" in line]
    assert not [line for line in ranks if "repeated" in line or "\x1b[" in line], ranks


@pytest.mark.slow
def test_a_dead_node_fails_the_gang_as_infra(
    ray_client: Any, workdir: Path, two_nodes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray may still count the dead node when the failure is read: the retry's placement then
    # waits this long before the job fails as unplaceable.
    monkeypatch.setenv("AIR_RENDEZVOUS_TIMEOUT_S", "30")
    info = gang(ray_client, workdir, str(tmp_path / "never"))
    log = lambda: ray_client.logs(info.job_id, tail=None).text  # noqa: E731
    both = lambda: "[rank0]: rank 0/2" in log() and "[rank1]: rank 1/2" in log()  # noqa: E731
    wait_until(both, timeout_s=180, every_s=0.5)
    assert two_nodes.kill_raylet() == 1
    done = ray_client.wait([info.job_id], timeout_s=180)[0]
    assert done.status == JobStatus.FAILED, (done.message, log())
    assert done.failure_kind == "infra", done.message
    # The cluster has one node left: no retry can place the 2-node gang, and it says so.
    died = "died" in done.message and "1 such node(s)" in done.message
    assert died or "could not give 2 separate nodes" in done.message, done.message
    # The dead node's rank: on a real cluster it went down with its machine; here the
    # machine lives on, so end it (it is this test's own process).
    for pid in processes_with(str(tmp_path / "never")):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_dead_node_is_retried_where_the_cluster_has_room(
    ray_client: Any, workdir: Path, ray_head: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills.testing.ray_node import LocalRayNode

    monkeypatch.setenv("AIR_RENDEZVOUS_TIMEOUT_S", "120")
    release = tmp_path / "release"
    with LocalRayNode(ray_head, num_gpus=1, num_cpus=2) as a, LocalRayNode(ray_head) as b:
        info = gang(ray_client, workdir, str(release))
        log = lambda: ray_client.logs(info.job_id, tail=None).text  # noqa: E731
        both = lambda: "[rank0]: rank 0/2" in log() and "[rank1]: rank 1/2" in log()  # noqa: E731
        wait_until(both, timeout_s=240, every_s=0.5)
        # A node that runs one of the ranks dies; the head and the other node remain.
        ranks = set(processes_with(str(release)))
        node = next(n for n in (a, b) if ranks & {p.pid for p in n._tree()})
        doomed = ranks & {p.pid for p in node._tree()}
        assert node.kill_raylet() == 1

        def requeued() -> list[dict[str, Any]]:
            ray_client.get(info.job_id)  # a client call reconciles with Ray
            events = [dict(e) for e in ray_client.store.events(info.job_id)]
            return [e for e in events if e["kind"] == "requeued-infra"]

        wait_until(lambda: requeued() or ray_client.get(info.job_id).status.is_terminal(), 180)
        assert requeued(), (ray_client.get(info.job_id).message, log())
        assert "died" in requeued()[0]["message"], requeued()[0]["message"]
        for pid in doomed:  # its torchrun and rank: gone with the machine on a real cluster
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        release.touch()
        done = ray_client.wait([info.job_id], timeout_s=240)[0]
    assert done.status == JobStatus.SUCCEEDED, (done.message, log())
    assert done.attempts == 2


def processes_with(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if name.isdigit() and token.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
    return [p for p in found if p != os.getpid()]


def test_more_nodes_than_the_cluster_has_is_refused(ray_client: Any, workdir: Path) -> None:
    with pytest.raises(InsufficientGpus) as err:
        gang(ray_client, workdir, nodes=2, gpus=2)  # the suite's head is one node
    assert "2 nodes with 2 GPU(s)" in err.value.message
    assert "1 such node(s)" in err.value.message and "per node:" in err.value.message
