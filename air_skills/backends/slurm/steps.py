"""What the node runs beyond one plain command: a gang over several nodes, a container image.

Several nodes (``nodes > 1``): the batch script finds the first node of the allocation
(``scontrol show hostnames $SLURM_JOB_NODELIST``), then ``srun`` starts one runner per node;
each starts torchrun with ``--nnodes``, ``--node-rank $SLURM_NODEID`` and the rendezvous on the
first node. The torchrun argv is written at submission with placeholders (``NODE_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``, ``NUM_NODES``) that the runner fills from Slurm's variables
on its node (the port: 20000 + the Slurm job id mod 20000, the same on every node).

An image: with the pyxis plugin (``srun --help`` lists ``--container-image``), the runner
starts the command as an ``srun --container-image`` step with the job folder (and workdir)
mounted at the same paths; without pyxis the launch is refused before anything is made.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.backends.slurm import commands
from air_skills.errors import InvalidSpec
from air_skills.runtime.execution import gang
from air_skills.runtime.execution.launch_env import CommandLaunch, thread_caps

# Filled by the runner on each node (runner.py: PLACEHOLDERS).
NODE_RANK, NUM_NODES = "{AIR_NODE_RANK}", "{AIR_NUM_NODES}"
MASTER_ADDR, MASTER_PORT = "{MASTER_ADDR}", "{MASTER_PORT}"


@functools.cache
def has_pyxis() -> bool:
    """Whether this cluster's srun takes ``--container-image`` (the pyxis SPANK plugin)."""
    try:
        proc = commands._run(["srun", "--help"])
    except Exception:  # no srun, no answer: no plugin we can drive
        return False
    return "--container-image" in (proc.stdout + proc.stderr)


def check_image(image: str | None, nodes: int = 1) -> None:
    """Refuse an image on a cluster without pyxis, before anything is made."""
    if image and nodes > 1:
        raise InvalidSpec(
            f"image {image!r} with nodes={nodes}: a container gang over several Slurm nodes"
            " is not built yet",
            hint="run the image on one node (procs for several processes), or drop --image",
        )
    if image and not has_pyxis():
        raise InvalidSpec(
            f"image {image!r}: this Slurm cluster has no container plugin (`srun --help` lists"
            " no --container-image, so pyxis/enroot is not installed)",
            hint="drop --image (the job runs its code snapshot with the launcher's Python), ask"
            " the cluster's admins for pyxis, or launch the image with backend 'local' or 'ray'",
        )


def container_argv(image: str, argv: list[str], jdir: Path, cwd: str | None) -> list[str]:
    """The command as a pyxis step: the image, the job folder and workdir at their paths."""
    mounts = [os.fspath(jdir)] + ([cwd] if cwd and not cwd.startswith(f"{jdir}/") else [])
    step = [
        "srun",
        "--ntasks=1",
        "--export=ALL",
        f"--container-image={image}",
        "--container-mounts=" + ",".join(f"{m}:{m}" for m in mounts),
    ]
    if cwd:
        step.append(f"--container-workdir={cwd}")
    return [*step, *argv]


def node_gang(launch: CommandLaunch, spec: dict[str, Any], jdir: Path) -> CommandLaunch:
    """A plain command's launch as one node's torchrun of a multi-node gang (placeholders)."""
    procs = gang.procs_of(spec, int(spec.get("gpus") or 0))
    cpus = int(spec.get("cpus") or 1)
    env = {**launch.env, **thread_caps(max(1, cpus // procs)), **gang.gang_env()}
    argv = gang.torchrun_argv(
        launch.argv,
        procs,
        gang.rank_log_dir(jdir),
        grace_s=settings.get("AIR_GRACE_S"),
        nnodes=NUM_NODES,  # type: ignore[arg-type]  # a placeholder, filled on the node
        node_rank=NODE_RANK,  # type: ignore[arg-type]
        master_addr=MASTER_ADDR,
        master_port=MASTER_PORT,  # type: ignore[arg-type]
    )
    return CommandLaunch(argv, launch.cwd, env, launch.log_path, launch.banner)


def gang_script_lines(jdir: Path) -> list[str]:
    """The batch script's body for several nodes: one runner per node through srun."""
    runner = [sys.executable, "-m", "air_skills.backends.slurm.runner", os.fspath(jdir)]
    return [
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_ADDR",
        # --export=ALL: steps would inherit sbatch's --export=NONE otherwise.
        "exec srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=1 " + shlex.join(runner),
    ]
