"""Issue 25: a sandboxed job sees only its own GPUs' device nodes, plus the control nodes.

No GPU here: AIR_SANDBOX_DEV_ROOT points the sandbox at a folder of stand-ins (regular files
named like the driver's nodes), bound into a real bwrap sandbox as the real nodes would be.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import spares_ready, started_ahead, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox, sandbox_devices

PY = sys.executable
pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")

LOOK = (
    "import json, os\n"
    "open('/dev/null', 'w').write('x')\n"  # the ordinary nodes still work
    "print('DEV ' + json.dumps({'dev': sorted(os.listdir('/dev')),"
    " 'caps': sorted(os.listdir('/dev/nvidia-caps')),"
    " 'mine': open('/dev/nvidia' + os.environ['CUDA_VISIBLE_DEVICES'].split(',')[0]).read(),"
    " 'shm': os.path.isdir('/dev/shm')}), flush=True)\n"
)


def _fake_dev(root: Path) -> Path:
    dev = root / "fake-dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm", "sda"):
        (dev / name).write_text(name)
    (dev / "nvidia-caps" / "nvidia-cap1").write_text("cap")
    return dev


def _seen(client: Client, job_id: str) -> dict[str, object]:
    info = client.wait([job_id], timeout_s=120)[0]
    log = client.logs(job_id, tail=None).text
    assert info.status == JobStatus.SUCCEEDED, (info.message, log)
    return json.loads(log.split("DEV ", 1)[1].splitlines()[0])


def test_a_job_sees_its_own_gpu_nodes_and_the_control_nodes_only(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX_DEV_ROOT", str(_fake_dev(tmp_path)))
    one = client.launch(JobSpec(command=[PY, "-c", LOOK], gpus=1, track=False, code="live"))
    two = client.launch(JobSpec(command=[PY, "-c", LOOK], gpus=2, track=False, code="live"))
    for info, count in ((one, 1), (two, 2)):
        seen = _seen(client, info.job_id)
        gpus = client.get(info.job_id).gpus
        assert len(gpus) == count
        nodes = {n for n in seen["dev"] if n.startswith("nvidia")}  # type: ignore[union-attr]
        assert nodes == {f"nvidia{g}" for g in gpus} | {"nvidiactl", "nvidia-uvm", "nvidia-caps"}
        assert "sda" not in seen["dev"]  # type: ignore[operator]
        assert "null" in seen["dev"] and seen["shm"]  # type: ignore[operator]
        assert seen["caps"] == ["nvidia-cap1"]
        assert seen["mine"] == f"nvidia{gpus[0]}"


def test_without_gpu_nodes_the_job_gets_a_fresh_dev_too(client: Client, tmp_path: Path) -> None:
    """Issue 37.3: no GPU nodes (simulated GPUs, a CPU machine) is no reason for the host's
    /dev: the job gets the same fresh one, with no disk, loop, zram or kmsg node."""
    empty = tmp_path / "no-gpus"
    empty.mkdir()
    assert sandbox_devices.dev_args([0], str(empty)) == ["--dev", "/dev"]
    probe = (
        "import os; names = os.listdir('/dev'); assert '/dev/null' and 'null' in names;"
        " bad = [n for n in names if n.startswith(('sd', 'loop', 'zram', 'nvme', 'vd', 'kmsg',"
        " 'mem', 'port'))]; assert not bad, bad"
    )
    info = client.launch(JobSpec(command=[PY, "-c", probe], gpus=1, track=False, code="live"))
    assert info.sandbox == "bwrap"
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, client.logs(info.job_id).text


def test_gpu_indices_map_to_device_minor_numbers(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path)
    args = sandbox_devices.dev_args([0], str(dev), lambda gpus: [3 for _ in gpus])
    bound = args[4::3]  # ["--dev", "/dev", then ("--dev-bind", src, dst) ...]
    assert "/dev/nvidia3" in bound and "/dev/nvidia0" not in bound


def test_a_sandbox_made_ahead_gives_a_gpu_job_the_same_nodes(
    client: Client, air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX_DEV_ROOT", str(_fake_dev(tmp_path)))
    first = client.launch(JobSpec(command=["true"], track=False, sandbox="off"))
    assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    wait_until(lambda: spares_ready(air_home), timeout_s=60)
    gate = tmp_path / "gate"  # seen through the job's workdir, bound read-only
    held = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)\n" + LOOK
    info = client.launch(
        JobSpec(command=[PY, "-c", held], gpus=1, track=False, code="live", workdir=str(tmp_path))
    )
    pid = wait_until(lambda: client.store.row(info.job_id).job_pid, timeout_s=60)
    assert started_ahead(pid)
    gate.write_text("go")
    seen = _seen(client, info.job_id)
    gpus = client.get(info.job_id).gpus
    nodes = {n for n in seen["dev"] if n.startswith("nvidia")}  # type: ignore[union-attr]
    assert nodes == {f"nvidia{g}" for g in gpus} | {"nvidiactl", "nvidia-uvm", "nvidia-caps"}
    assert "sda" not in seen["dev"] and "null" in seen["dev"]  # type: ignore[operator]
    assert seen["mine"] == f"nvidia{gpus[0]}" and seen["caps"] == ["nvidia-cap1"]
