"""What a job ran on: GPU model and count, driver and CUDA versions (where NVML has them), CPU
model, host and backend; and the hardware class that says which results compare.

Results from an RTX 3060 and an H100 under the same time budget are not comparable: the class
("H100 80GB", "A10G", "CPU") is what ``compare``, leaderboards and studies check.
"""

from __future__ import annotations

import functools
import json
import platform
import re
import socket
from pathlib import Path
from typing import Any

from air_skills.gpu.providers import provider
from air_skills.home import read_job_json
from air_skills.job_folder import write_in

HARDWARE_FILE = "hardware.json"  # in the job's folder, written when its command has started
_VENDOR = re.compile(r"^(NVIDIA|Tesla|GeForce|Quadro|AMD|Radeon)\s+", re.IGNORECASE)
_MEMORY = re.compile(r"\b(\d+)\s*GB\b", re.IGNORECASE)
_NOISE = re.compile(r"[-\s](HBM\d?e?|PCIe|SXM\d?|NVL)\b", re.IGNORECASE)  # packaging, memory type


SIMULATED = "Simulated GPU"  # the simulated provider's device name (gpu/simulated.py)


def gpu_class(name: str, memory_mb: int = 0) -> str:
    """A GPU model name without vendor and packaging, with its memory: "H100 80GB", "A10G".
    A simulated GPU is "CPU": its job computes on this machine's CPU, as a CPU slot's does,
    so their results compare (issue 39.6)."""
    if name.strip().startswith(SIMULATED):
        return "CPU"
    text = _VENDOR.sub("", name.strip())
    text = _VENDOR.sub("", text)  # "NVIDIA GeForce RTX 3060"
    mem = _MEMORY.search(text)
    base = _NOISE.sub("", _MEMORY.sub("", text)).strip(" -")
    if mem:
        return f"{base} {mem.group(1)}GB"
    if memory_mb >= 30 * 1024:  # a big card's memory tells its variant (A100 40GB / 80GB)
        return f"{base} {round(memory_mb / 1024)}GB"
    return base


def hardware_class(info: dict[str, Any] | None) -> str | None:
    """The class of a job's hardware record ("2x H100 80GB", "CPU"); None when unknown."""
    if not info:
        return None
    return info.get("class")


def comparable_class(cls: str | None) -> str | None:
    """The class a result compares by: a simulated GPU's (also as an older record wrote it,
    "Simulated GPU 80GB", "2x Simulated GPU 80GB") is the CPU's."""
    if cls and SIMULATED in cls:
        return "CPU"
    return cls


def not_comparable(classes: list[str | None]) -> str | None:
    """The note "not comparable: H100 80GB vs A10G" when the known classes differ, else None."""
    known = list(dict.fromkeys(c for c in map(comparable_class, classes) if c))
    return f"not comparable: {' vs '.join(known)}" if len(known) > 1 else None


@functools.cache
def host_facts() -> dict[str, Any]:
    """This machine: host name, CPU model, NVIDIA driver and CUDA versions (None if unknown)."""
    return {
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        **_nvml_versions(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"driver": None, "cuda": None}
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        out["cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception:  # no driver, no library, an old NVML: the versions stay unknown
        pass
    return out


def describe(gpus: list[int], backend: str = "local") -> dict[str, Any]:
    """The hardware record of a job on this machine's GPUs ``gpus`` (indices)."""
    devices = {d.index: d for d in provider().devices()}
    mine = [devices[i] for i in gpus if i in devices]
    names = sorted({d.name for d in mine})
    classes = sorted({gpu_class(d.name, d.memory_mb) for d in mine})
    if not gpus or classes == ["CPU"]:  # no GPU, or simulated ones: the CPU computes
        cls = "CPU"
    elif classes:
        cls = (f"{len(gpus)}x " if len(gpus) > 1 else "") + " + ".join(classes)
    else:
        cls = None
    return {
        "gpu_model": ", ".join(names) or None,
        "gpu_count": len(gpus),
        "gpu_memory_mb": mine[0].memory_mb if mine else None,
        "class": cls,
        "backend": backend,
        **host_facts(),
    }


def mlflow_tags(info: dict[str, Any]) -> dict[str, str]:
    """The record as MLflow tags ``air.hardware.*`` (unknown values left out)."""
    return {f"air.hardware.{k}": str(v) for k, v in info.items() if v is not None}


def write_record(job_folder: Path, info: dict[str, Any]) -> None:
    """Write the job's hardware record into its folder (whole, or not at all)."""
    # A fresh temp file renamed over the name: a link the job left there is not written through.
    write_in(job_folder, HARDWARE_FILE, json.dumps(info, sort_keys=True))


def read_record(log_path: str | None) -> dict[str, Any] | None:
    """The hardware record beside a job's log (its folder); None before its start (a cluster
    job's comes from its node: gpu/node_hardware.py)."""
    if not log_path:
        return None
    try:
        data = read_job_json(Path(log_path).parent / HARDWARE_FILE)  # a FIFO: refused at once
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
