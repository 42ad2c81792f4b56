"""What a Slurm batch job runs: ``python -m air_skills.backends.slurm.runner JOB_DIR``.

Stdlib only. It starts the job's command exactly as a local supervisor would (argv, folder and
environment prepared at submission in ``slurm-launch.json``, owner-only), with the GPUs Slurm
gave it, its output appended to the job's log; it forwards Slurm's signals and, when the
command ends, writes ``slurm-exit.json`` (exit code or signal) so the job can be settled from
its files even after Slurm has forgotten it (MinJobAge).

In a gang of several nodes (``srun`` starts one runner per node, steps.py) each runner fills
the torchrun argv's placeholders from Slurm's variables (its node rank, the first node, the
node count), sets ``AIR_NODE_RANK`` / ``AIR_NUM_NODES`` as a Ray gang's nodes get them, and
only node 0 writes ``slurm-exit.json`` (the others ``slurm-exit.node<N>.json``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from air_skills.job_folder import JobFolder, write_in

LAUNCH_FILE = "slurm-launch.json"
EXIT_FILE = "slurm-exit.json"
# Variables Slurm sets on the node that the job keeps (its GPUs, its allocation).
FROM_SLURM = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_JOB_GPUS", "SLURM_JOB_NODELIST")
PORT_BASE = 20000


def node_values(environ: dict[str, str]) -> dict[str, str]:
    """This node's place in the allocation, from Slurm's variables (steps.py's placeholders)."""
    job = int(environ.get("SLURM_JOB_ID") or 0)
    return {
        "AIR_NODE_RANK": environ.get("SLURM_NODEID", "0"),
        "AIR_NUM_NODES": environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES", "1"),
        "MASTER_ADDR": environ.get("MASTER_ADDR") or os.uname().nodename,
        "MASTER_PORT": str(PORT_BASE + job % 20000),
    }


def fill(argv: list[str], values: dict[str, str]) -> list[str]:
    """The argv with each ``{NAME}`` placeholder argument replaced by its value."""
    return [values.get(a[1:-1], a) if a[:1] == "{" and a[-1:] == "}" else a for a in argv]


def _read_launch(jdir: Path) -> dict[str, Any]:
    fd = os.open(jdir / LAUNCH_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return json.loads(f.read(16 * 2**20))


def _write_exit(jdir: Path, record: dict[str, Any], node: str = "0") -> None:
    name = EXIT_FILE if node == "0" else f"slurm-exit.node{node}.json"
    write_in(jdir, name, json.dumps(record))  # a fresh temp file: never through a link


def _record_hardware(jdir: Path) -> None:
    """hardware.json as a local job's (air_skills/gpu/node_hardware.py: imported only now,
    while the command runs, so the runner starts on the standard library alone)."""
    try:
        from air_skills.gpu.node_hardware import record

        record(jdir, "slurm")
    except Exception:  # a record less: the job itself is not affected
        pass


def run(jdir: Path) -> int:
    launch = _read_launch(jdir)
    env = dict(launch["env"])
    env.update({k: os.environ[k] for k in FROM_SLURM if k in os.environ})
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    if launch.get("srun_step"):  # an srun step (a container) runs inside this allocation
        env.update({k: v for k, v in os.environ.items() if k.startswith("SLURM_")})
    slurm_id = os.environ.get("SLURM_JOB_ID", "")
    gang = launch.get("nodes", 1) > 1
    values = node_values(dict(os.environ))
    argv = fill(launch["argv"], values) if gang else launch["argv"]
    if gang:
        env.update({k: values[k] for k in ("AIR_NODE_RANK", "AIR_NUM_NODES")})
    node = values["AIR_NODE_RANK"] if gang else "0"
    # The job's folder is the job's to write (an earlier attempt may have left links): worked
    # on by descriptor, no link followed (air_skills/job_folder.py).
    config = launch.get("config")
    with JobFolder.open(jdir) as top:
        if top.lstat("checkpoints") is None:
            top.mkdir("checkpoints")
        if config is not None and top.lstat("config.json") is None:
            top.write("config.json", json.dumps(config))
    log_path = Path(launch["log_path"])
    with JobFolder.open(log_path.parent) as folder:
        log_fd = folder.open_append(log_path.name)
    with os.fdopen(log_fd, "ab") as log:
        where = f" node {node}" if gang else ""
        log.write(f"[air] Slurm job {slurm_id}{where} on {os.uname().nodename}\n".encode())
        log.flush()
        if launch.get("sandbox") and not os.access(argv[0], os.X_OK):
            # A sandboxed job never runs bare: a node without bubblewrap refuses it.
            log.write(
                f"[air] this node has no bubblewrap ({argv[0]}): a sandboxed job does not run"
                " without its sandbox. Next: install bubblewrap on the node, or exclude the"
                " node\n".encode()
            )
            log.flush()
            _write_exit(jdir, {"slurm_id": slurm_id, "ended_at": time.time(), "exit_code": 126})
            return 126
        how: dict[str, Any] = {
            "cwd": launch.get("cwd"),
            "env": env,
            "stdin": subprocess.DEVNULL,
            "stdout": log,
            "stderr": subprocess.STDOUT,
            "close_fds": True,
        }
        if launch.get("slirp"):  # bwrap waits until slirp4netns serves its namespace
            from air_skills.runtime.execution import sandbox_net

            proc = sandbox_net.popen(argv, launch["slirp"], log, **how)
        else:
            proc = subprocess.Popen(argv, **how)

    def forward(signum: int, _frame: object) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    if node == "0":  # what it runs on, in the job's folder, once it has started
        _record_hardware(jdir)
    code = proc.wait()
    record: dict[str, Any] = {"slurm_id": slurm_id, "ended_at": time.time()}
    if code < 0:
        record["signal"] = signal.Signals(-code).name
        record["exit_code"] = None
    else:
        record["exit_code"] = code
    _write_exit(jdir, record, node)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
