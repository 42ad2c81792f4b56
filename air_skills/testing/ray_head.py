"""A throwaway single-node Ray head on this machine, for tests, benchmarks and demos."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from air_skills.polling import backoff


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_bin_path(bindir: str) -> str:
    ray_bin = os.path.join(bindir, "ray")
    return ray_bin if os.path.exists(ray_bin) else "ray"


# `ray start --node-ip-address 127.0.0.1` swaps a loopback address for the machine's network
# address (ray._private.services.resolve_ip_for_localhost), and so does every ray.init of an
# address on 127.0.0.1 (the dashboard agent's, a job's): the GCS and raylet then listened on
# every interface and the client server and agents on that address. Ray keeps 127.0.0.1 where
# it believes it runs a one-machine cluster (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, in every
# process it starts: ray_env), and binds every server to 127.0.0.1 when that is the node's
# address. That belief also refuses a second node's `ray start`: its own process is told
# otherwise, keeping the address it is given.
_KEEP_LOOPBACK = (
    "import sys; import ray._private.ray_constants as c; c.ENABLE_RAY_CLUSTER = True;"
    " import ray._private.services as s; s.resolve_ip_for_localhost = lambda h: h;"
    " from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"
)


def ray_start_argv(*args: str) -> list[str]:
    """argv of ``ray start ARGS`` from this Python, keeping a loopback --node-ip-address."""
    return [sys.executable, "-c", _KEEP_LOOPBACK, "start", *args]


def ray_env(bindir: str, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without AIR's, MLflow's or another cluster's address."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIR_", "MLFLOW_", "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"))
    }
    env.update(
        {
            "PATH": bindir + os.pathsep + env.get("PATH", ""),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # 127.0.0.1 stays 127.0.0.1: see below
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            **extra,
        }
    )
    return env


class LocalRayHead:
    """A single-node Ray head with fake GPUs, every server of it on 127.0.0.1, on free ports.

    Runs ``ray start --head --block`` in its own session with a private temp dir; ``stop``
    signals exactly the processes it started (``ray stop`` would stop every Ray on the box).
    """

    def __init__(
        self,
        num_gpus: int = 4,
        num_cpus: int = 2,
        env: dict[str, str] | None = None,
        object_store_mb: int = 128,
    ) -> None:
        self.num_gpus = num_gpus
        self.num_cpus = num_cpus
        self.extra_env = env or {}
        self.object_store_mb = object_store_mb
        self.proc: subprocess.Popen[bytes] | None = None
        self.temp_dir: str | None = None
        self.address = ""
        self.gcs_port = 0

    def start(self, timeout_s: float = 120.0) -> str:
        """Start the head and wait until its Jobs API answers; returns the dashboard URL."""
        self.temp_dir = tempfile.mkdtemp(prefix="airray-", dir="/tmp")  # short: socket paths
        self.gcs_port = free_port()
        dash = free_port()
        bindir = os.path.dirname(sys.executable)
        env = ray_env(bindir, self.extra_env)
        argv = ray_start_argv(
            "--head", "--block", "--disable-usage-stats",
            "--node-ip-address", "127.0.0.1",
            "--num-gpus", str(self.num_gpus), "--num-cpus", str(self.num_cpus),
            "--port", str(self.gcs_port),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
            "--ray-client-server-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()),
            "--object-store-memory", str(self.object_store_mb * 2**20),
            "--temp-dir", self.temp_dir,
        )  # fmt: skip
        out = open(Path(self.temp_dir) / "head.out", "wb")
        self.proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        out.close()
        self.address = f"http://127.0.0.1:{dash}"
        for _ in backoff(first_s=0.2, cap_s=1.0, timeout_s=timeout_s):
            if self._ready():
                return self.address
            if self.proc.poll() is not None:
                break
        tail = (Path(self.temp_dir) / "head.out").read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"the Ray head did not come up:\n{tail}")

    def _ready(self) -> bool:
        import urllib.request

        token = self.extra_env.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        def get(path: str) -> Any:
            req = urllib.request.Request(self.address + path, headers=headers)
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())

        try:
            get("/api/jobs/")
            nodes = get("/api/v0/nodes?detail=1")["data"]["result"]["result"]
            return any(
                n.get("state") == "ALIVE"
                and n.get("resources_total", {}).get("GPU", 0) >= self.num_gpus
                for n in nodes
            )
        except Exception:
            return False

    def stop(self) -> None:
        """SIGTERM the head (it stops its own processes), then SIGKILL what is left of them."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        try:
            import psutil

            tree = psutil.Process(proc.pid).children(recursive=True)
        except Exception:
            tree = []
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if tree:
            import psutil

            _, alive = psutil.wait_procs(tree, timeout=5)
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(alive, timeout=5)
        if self.temp_dir:
            import shutil

            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayHead:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
