"""A cluster job's hardware record, made on its node (issue 27): from the GPUs the node gave
it, into the job's folder (Slurm) or through its log's first line (Ray)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from air_skills.gpu.hardware import HARDWARE_FILE, read_record
from air_skills.gpu.node_hardware import MARKER, on_node, record, settle_from_log


def test_the_node_describes_the_gpus_it_gave_the_job(monkeypatch) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "4")
    info = on_node("slurm", {"CUDA_VISIBLE_DEVICES": "1,2"})
    assert info["backend"] == "slurm" and info["gpu_count"] == 2
    # Simulated GPUs compute on the CPU: one class with CPU slots (issue 39 item 6).
    assert info["gpu_model"] == "Simulated GPU" and info["class"] == "CPU"
    assert info["host"] and info["cpu"]
    assert on_node("ray", {})["class"] == "CPU"
    uuids = on_node("ray", {"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"})  # counted, not named
    assert uuids["gpu_count"] == 2 and uuids["class"] is None


def test_slurm_writes_the_folder_and_ray_goes_through_the_log(tmp_path: Path) -> None:
    slurm = tmp_path / "slurm-job"
    slurm.mkdir()
    record(slurm, "slurm")
    assert read_record(str(slurm / "job.log"))["backend"] == "slurm"

    ray = tmp_path / "ray-job"
    ray.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "air_skills.gpu.node_hardware", "ray"],
        capture_output=True, text=True, check=True, env={"CUDA_VISIBLE_DEVICES": "0"},
    )  # fmt: skip
    assert out.stdout.startswith(MARKER)
    log = ray / "job.log"
    log.write_text("step 1\n" + MARKER[:-1])  # the line not whole yet: nothing
    settle_from_log(str(log))
    assert not (ray / HARDWARE_FILE).exists()
    log.write_text(out.stdout + "step 1\n")
    settle_from_log(str(log))
    assert read_record(str(log)) == json.loads(out.stdout[len(MARKER) :])
    assert read_record(str(log))["gpu_count"] == 1
