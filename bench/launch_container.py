"""The container row of bench/launch.py: ``air launch --image`` vs ``podman run`` by hand.

Both run the image's ``cat /proc/uptime`` as the first instruction: the kernel's boot-time
clock (10 ms steps), the same inside a container, read from the output. Each air launch is
measured beside one ``podman run`` typed by hand. Goal: at most 1.2x. The image is the tests'
busybox image (tests/air_skills/execution/test_containers.py builds it); ``measure`` returns None
when
podman or the image is not here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

IMAGE = "localhost/air-test-busybox:1"
GOAL = 1.2
COMMAND = ["cat", "/proc/uptime"]


def _stamp(text: str) -> float | None:
    for line in text.splitlines():
        try:
            return float(line.split()[0])
        except (ValueError, IndexError):
            continue
    return None


def _now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def by_hand() -> float:
    """Seconds from ``podman run`` called to the container's first instruction."""
    t0 = _now()
    done = subprocess.run(
        ["podman", "run", "--rm", IMAGE, *COMMAND], capture_output=True, text=True, check=True
    )
    stamp = _stamp(done.stdout)
    assert stamp is not None, done.stdout
    return stamp - t0


def by_air(client: object) -> float:
    """Seconds from ``Client.launch`` called to the same instruction in the job's container."""
    from air_skills import JobSpec

    spec = JobSpec(command=COMMAND, image=IMAGE, track=False, code="live", name="bench-image")
    t0 = _now()
    info = client.launch(spec)  # type: ignore[attr-defined]
    (done,) = client.wait([info.job_id], timeout_s=60, any=False)  # type: ignore[attr-defined]
    stamp = _stamp(Path(done.log_path).read_text())
    if stamp is None:
        raise RuntimeError(f"bench job {done.job_id} ended {done.status}: {done.message}")
    return stamp - t0


# What podman 4.3 needs in these sandboxes (issue 16, "These machines"; the container tests
# use the same): no rlimits set on the container, runc, cgroupfs.
SANDBOX_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""


def _sandbox_conf() -> None:
    """Use the sandbox's containers.conf when podman cannot run the image without it."""
    probe = subprocess.run(["podman", "run", "--rm", IMAGE, "true"], capture_output=True)
    if probe.returncode == 0:
        return
    conf = Path(tempfile.mkdtemp(prefix="air-bench-podman-")) / "containers.conf"
    conf.write_text(SANDBOX_CONF)
    os.environ["CONTAINERS_CONF"] = str(conf)


def measure(client: object, n: int) -> tuple[list[float], list[float]] | None:
    """(air launches, podman runs by hand), interleaved; None without podman or the image."""
    if shutil.which("podman") is None:
        return None
    if subprocess.run(["podman", "image", "exists", IMAGE]).returncode != 0:
        return None
    os.environ.setdefault("AIR_CONTAINER_ENGINE", "podman")
    if "CONTAINERS_CONF" not in os.environ:
        _sandbox_conf()
    by_hand()  # warm the engine's storage and the page cache
    by_air(client)
    air: list[float] = []
    hand: list[float] = []
    for i in range(n):
        for which in ("air", "hand") if i % 2 == 0 else ("hand", "air"):
            (air if which == "air" else hand).append(
                by_air(client) if which == "air" else by_hand()
            )
    return air, hand
