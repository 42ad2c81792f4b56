"""The Ray job entrypoint of a multi-node gang: a placement group, torchrun on every node.

Run as ``python -m air_skills.backends.ray.gang_driver`` by Ray (the entrypoint that
backends/ray/gangs.py writes), with the plan in AIR_GANG_PLAN. It reserves one bundle per
node (STRICT_SPREAD: no two on one node), starts one ``NodeRank`` actor in each, and runs
torchrun there with ``--nnodes N --node-rank i --master-addr <node 0's IP>``. The first node
whose torchrun fails, or that dies, ends the gang: the others are stopped (SIGTERM, then
SIGKILL after the grace period) and the driver exits with that node's code; a dead node is
said on a line starting with NODE_DIED, which the reconciler reads as an infra failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from air_skills import settings
from air_skills.backends.ray.gangs import NODE_DIED, NOT_JOINED, NOT_PLACED
from air_skills.runtime.execution import gang
from air_skills.runtime.process import proc

EXIT_NODE_DIED = 75  # EX_TEMPFAIL: the reconciler makes it infra by the NODE_DIED line
EXIT_NOT_PLACED = 75


class NodeRank:
    """One node of the gang: runs torchrun there, a subreaper of what it leaves behind."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        proc.become_subreaper()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def free_port(self) -> int:
        """A port free on this node now, for torchrun's rendezvous store on node 0."""
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def run(self, argv: list[str], env: dict[str, str]) -> int:
        """Run torchrun, its output line by line to this actor's stdout (Ray sends it on)."""
        full = {**os.environ, **env}  # Ray set CUDA_VISIBLE_DEVICES to the bundle's GPUs
        self.child = subprocess.Popen(
            argv,
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            process_group=0,
        )
        assert self.child.stdout is not None
        for line in self.child.stdout:
            sys.stdout.write(line.decode("utf-8", "replace"))
            sys.stdout.flush()
        return self.child.wait()

    def stop(self, grace_s: float) -> None:
        """SIGTERM torchrun (it stops its ranks), SIGKILL after ``grace_s``, then the rest."""
        child = self.child
        if child is not None and child.poll() is None:
            proc.kill_group(child.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.kill_group(child.pid, signal.SIGKILL)
        proc.sweep_descendants()  # ranks in their own sessions (torchrun starts them so)


def _node_argv(plan: dict[str, Any], i: int, master: str, port: int) -> list[str]:
    return gang.torchrun_argv(
        plan["command"],
        plan["procs"],
        plan["log_dir"],
        grace_s=plan["grace_s"],
        nnodes=plan["nodes"],
        node_rank=i,
        master_addr=master,
        master_port=port,
        rendezvous_s=plan["rendezvous_s"],
    )


def main() -> int:
    plan: dict[str, Any] = json.loads(settings.get("AIR_GANG_PLAN"))
    del os.environ["AIR_GANG_PLAN"]  # the ranks' environment is the job's, without it
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init()
    n, gpus, cpus = plan["nodes"], plan["gpus"], plan["cpus"]
    bundle = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
    pg = placement_group([dict(bundle) for _ in range(n)], strategy="STRICT_SPREAD")
    try:
        ray.get(pg.ready(), timeout=plan["rendezvous_s"])
    except Exception as exc:
        print(
            f"{NOT_PLACED} the cluster could not give {n} separate nodes {bundle} within"
            f" {plan['rendezvous_s']} s ({type(exc).__name__})",
            flush=True,
        )
        return EXIT_NOT_PLACED
    actor = ray.remote(NodeRank)
    actors = [
        actor.options(
            num_cpus=cpus,
            num_gpus=gpus,
            max_concurrency=2,  # stop() while run() runs
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i
            ),
        ).remote()
        for i in range(n)
    ]
    # Every node's actor must start (its worker, its runtime env) within the rendezvous
    # timeout, or the gang fails naming the node ranks that joined.
    ids = [a.node_id.remote() for a in actors]
    ready, _ = ray.wait(ids, num_returns=n, timeout=plan["rendezvous_s"])
    if len(ready) < n:
        print(never_joined([i for i, r in enumerate(ids) if r in ready], n, plan), flush=True)
        _teardown(ray, actors, pg, plan["grace_s"])
        return EXIT_NOT_PLACED
    # The address each node registered with Ray (what its peers reach it by).
    address = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    ips = [address[node] for node in ray.get(ids)]
    port = ray.get(actors[0].free_port.remote())
    common = {"AIR_NUM_NODES": str(n), "AIR_NODE_IPS": ",".join(ips), **gang.gang_env()}
    runs = {
        actors[i].run.remote(
            _node_argv(plan, i, ips[0], port), {**common, "AIR_NODE_RANK": str(i)}
        ): i
        for i in range(n)
    }
    stopping = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(now=True))
    rc = 0
    pending = list(runs)
    while pending and not stopping["now"]:
        done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
        if not done:
            continue
        i = runs[done[0]]
        try:
            code = ray.get(done[0])
        except Exception as exc:  # the actor's node (or the actor) died
            why = (str(exc).strip().splitlines() or [""])[-1][:300]
            print(f"{NODE_DIED} node {i} ({ips[i]}): {type(exc).__name__}: {why}", flush=True)
            rc = EXIT_NODE_DIED
            break
        if code != 0:
            print(f"[air] node {i} ({ips[i]}) failed (exit code {code}); stopping the others")
            rc = code
            break
    _teardown(ray, actors if pending or stopping["now"] else [], pg, plan["grace_s"])
    sys.stdout.flush()
    return 143 if stopping["now"] and rc == 0 else rc


def never_joined(joined: list[int], n: int, plan: dict[str, Any]) -> str:
    """The NOT_JOINED line: which node ranks' actors started in time, which never did."""
    missing = [i for i in range(n) if i not in joined]

    def ranks(nodes: list[int]) -> str:
        word = "node rank" if len(nodes) == 1 else "node ranks"
        return f"{word} {', '.join(str(i) for i in nodes)}" if nodes else "no node"

    return (
        f"{NOT_JOINED} rendezvous timed out after {plan['rendezvous_s']:g} s:"
        f" {ranks(joined)} joined; {ranks(missing)} never joined"
    )


def _teardown(ray: Any, actors: list[Any], pg: Any, grace_s: float) -> None:
    """Stop the nodes' torchruns (TERM, grace, KILL), end the actors, free the bundles."""
    from ray.util.placement_group import remove_placement_group

    if actors:
        stops = [a.stop.remote(grace_s) for a in actors]
        with contextlib.suppress(Exception):
            ray.get(stops, timeout=grace_s + 10)
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
    with contextlib.suppress(Exception):
        remove_placement_group(pg)


if __name__ == "__main__":
    sys.exit(main())
