"""A sandboxed job's /dev: only its own GPUs' device nodes, plus the control nodes CUDA needs.

Every sandboxed job gets a fresh minimal /dev (bwrap ``--dev``: null, zero, full, random,
urandom, tty, pts; sandbox.base_args adds a private /dev/shm): no disk, loop or zram node, no
/dev/kmsg. Where the device-node folder (AIR_SANDBOX_DEV_ROOT, ``/dev``) holds ``nvidiaN``
nodes, bound into it from that folder: its GPUs' ``nvidiaN`` (N: the GPU's minor number), the
control nodes (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps/) and
InfiniBand's folder (NCCL over RDMA); another job's GPU is not there to open, whatever
CUDA_VISIBLE_DEVICES says. Stdlib only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

# What CUDA opens besides the GPUs' own nodes, and the other device folders a job may need.
CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
PASSED = ("infiniband",)
_GPU_NODE = re.compile(r"nvidia(\d+)")
# The device folder's listing, by (folder, its mtime): a node added or removed changes it.
_LISTED: dict[str, tuple[int, tuple[str, ...]]] = {}


def gpu_nodes(root: str) -> tuple[str, ...]:
    """The names in ``root`` (the device folder), read again only when the folder changed."""
    try:
        stamp = os.stat(root).st_mtime_ns
    except OSError:
        return ()
    seen = _LISTED.get(root)
    if seen is not None and seen[0] == stamp:
        return seen[1]
    try:
        names = tuple(sorted(os.listdir(root)))
    except OSError:
        names = ()
    _LISTED[root] = (stamp, names)
    return names


def dev_args(
    gpus: Iterable[int], root: str, minors: Callable[[list[int]], list[int]] | None = None
) -> list[str]:
    """bwrap's arguments for the job's /dev. ``minors`` maps GPU indices to their device
    nodes' numbers (NVML's minor numbers; the index itself when not given)."""
    names = gpu_nodes(root)
    if not any(_GPU_NODE.fullmatch(n) for n in names):
        return ["--dev", "/dev"]
    wanted = list(gpus)
    numbers = minors(wanted) if minors is not None and wanted else wanted
    allowed = {f"nvidia{n}" for n in numbers} | set(CONTROL) | set(PASSED)
    out = ["--dev", "/dev"]
    for name in names:
        if name in allowed:
            src = os.path.join(root, name)
            out += ["--dev-bind", src, "/dev/" + name]
    return out
