"""A second Ray node (a raylet) joined to a LocalRayHead on this machine: a two-node cluster
on 127.0.0.1 for gang tests, with fake GPUs; ``kill_raylet`` makes the node die."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from air_skills.testing.ray_head import LocalRayHead, free_port, ray_env, ray_start_argv


class LocalRayNode:
    """``ray start --address <head> --block`` in its own session, stopped by its own pids."""

    def __init__(self, head: LocalRayHead, num_gpus: int = 1, num_cpus: int = 2) -> None:
        self.head = head
        self.num_gpus = num_gpus
        self.num_cpus = num_cpus
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = Path(head.temp_dir or "/tmp") / f"node-{os.getpid()}-{time.time_ns()}.out"

    def start(self, timeout_s: float = 120.0) -> None:
        """Join the head and wait until it lists an ALIVE node it did not list before (by id: a
        node stopped just before may be marked dead meanwhile, so a count would not grow)."""
        before = self._alive_nodes()
        bindir = os.path.dirname(sys.executable)
        argv = ray_start_argv(
            "--block", "--disable-usage-stats",
            "--address", f"127.0.0.1:{self.head.gcs_port}",
            "--node-ip-address", "127.0.0.1",
            "--num-gpus", str(self.num_gpus), "--num-cpus", str(self.num_cpus),
            "--dashboard-agent-listen-port", str(free_port()),
            "--object-store-memory", str(self.head.object_store_mb * 2**20),
        )  # fmt: skip
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=ray_env(bindir, self.head.extra_env),
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while not self._alive_nodes() - before:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.out.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"the second Ray node did not join:\n{tail}")
            time.sleep(0.5)

    def _alive_nodes(self) -> set[str]:
        token = self.head.extra_env.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request(self.head.address + "/api/v0/nodes?detail=1", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                nodes: list[dict[str, Any]] = json.loads(r.read())["data"]["result"]["result"]
        except Exception:
            return set()
        return {str(n.get("node_id")) for n in nodes if n.get("state") == "ALIVE"}

    def _tree(self) -> list[Any]:
        import psutil

        if self.proc is None:
            return []
        with contextlib.suppress(psutil.Error):
            return list(psutil.Process(self.proc.pid).children(recursive=True))
        return []

    def kill_raylet(self) -> int:
        """SIGKILL this node's raylet (the node dies as a crashed machine's would)."""
        killed = 0
        for p in self._tree():
            with contextlib.suppress(Exception):
                if p.name() == "raylet":
                    p.send_signal(signal.SIGKILL)
                    killed += 1
        return killed

    def stop(self) -> None:
        """SIGKILL the node's processes and everything they started (its workers)."""
        import psutil

        proc, tree = self.proc, self._tree()
        self.proc = None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait()
        psutil.wait_procs(tree, timeout=5)

    def __enter__(self) -> LocalRayNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
