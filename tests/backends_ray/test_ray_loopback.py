"""Issue 37.14: the Ray head and a joined node the suite starts listen on 127.0.0.1 only: the
GCS, the raylet, the client server, the dashboard, its agents and their metrics ports (Ray's
client and job APIs run code without asking; `ray start` swapped 127.0.0.1 for the machine's
address and bound the GCS and raylet to every interface)."""

from __future__ import annotations

from typing import Any

import pytest
from listening import beyond_loopback, listening, process_tree

pytestmark = pytest.mark.slow


def test_a_head_and_a_joined_node_listen_on_loopback_only(ray_head: Any) -> None:
    from air_skills.testing.ray_node import LocalRayNode

    head = process_tree(ray_head.proc.pid)
    names = {open(f"/proc/{p}/comm").read().strip() for _, _, p, _ in listening(head)}
    assert {"gcs_server", "raylet"} <= names  # the servers are there to be checked
    assert not beyond_loopback(head)
    with LocalRayNode(ray_head, num_gpus=1, num_cpus=1) as node:
        assert node.proc is not None
        assert not beyond_loopback(process_tree(node.proc.pid))
