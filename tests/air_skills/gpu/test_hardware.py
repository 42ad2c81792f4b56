"""What a job ran on: the record in JobInfo and in MLflow tags, the hardware class, and
``compare`` flagging results from different classes (issue 27)."""

from __future__ import annotations

import sys

import pytest
from helpers import wait_until

from air_skills import Client
from air_skills.gpu.hardware import gpu_class, not_comparable
from air_skills.models import JobSpec

PY = sys.executable


@pytest.mark.parametrize(
    ("name", "memory_mb", "cls"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100 80GB"),
        ("NVIDIA H100 PCIe", 81559, "H100 80GB"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100 40GB"),
        ("NVIDIA A10G", 23028, "A10G"),
        ("NVIDIA GeForce RTX 3060", 12288, "RTX 3060"),
        ("Tesla T4", 15360, "T4"),
    ],
)
def test_a_gpu_name_gives_its_class(name: str, memory_mb: int, cls: str) -> None:
    assert gpu_class(name, memory_mb) == cls


def test_different_classes_are_not_comparable() -> None:
    assert not_comparable(["H100 80GB", "A10G", "H100 80GB"]) == "not comparable: H100 80GB vs A10G"
    assert not_comparable(["A10G", "A10G", None]) is None


def _finished(client: Client, **spec: object):
    info = client.launch(
        JobSpec(command=[PY, "-c", "print('---'); print('loss: 0.5')"], **spec)  # type: ignore[arg-type]
    )
    assert client.wait([info.job_id], timeout_s=120)[0].status.value == "SUCCEEDED"
    # the record is written beside the run's other MLflow work, just after the start
    return wait_until(lambda: client.get(info.job_id).hardware and client.get(info.job_id))


@pytest.mark.slow
def test_a_job_records_its_hardware_in_jobinfo_and_mlflow(client: Client) -> None:
    gpu = _finished(client, gpus=1)
    hw = gpu.hardware
    assert hw["gpu_model"] == "Simulated GPU" and hw["gpu_count"] == 1
    # a simulated GPU computes on the CPU: its class is the CPU slot's (issue 39.6)
    assert hw["class"] == "CPU" and hw["backend"] == "local"
    assert hw["host"] and hw["cpu"]
    assert "driver" in hw and "cuda" in hw  # None here: NVML has no driver on this machine
    tags = client.tracker.client.get_run(gpu.run_id).data.tags
    assert tags["air.hardware.class"] == "CPU"
    assert tags["air.hardware.gpu_count"] == "1"

    cpu = _finished(client, gpus=0)
    assert cpu.hardware["class"] == "CPU" and cpu.hardware["gpu_model"] is None

    table = client.compare([gpu.job_id, cpu.job_id], metric="loss")
    assert "hardware" not in table[0]  # a simulated GPU and a CPU slot compare
    same = client.compare([gpu.job_id, gpu.job_id], metric="loss")
    assert "hardware" not in same[0]  # one class: nothing to flag
