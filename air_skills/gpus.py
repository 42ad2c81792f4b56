"""GPU inventory: NVML on real machines, a simulated pool when AIR_SIMULATED_GPUS=N is set.

Health checks (Xid, ECC, throttling, ...) live in ``air_skills.health``; this module only
answers "which GPUs are there" and hands health questions to the provider's ``faults``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    memory_mb: int
    uuid: str = ""


@dataclass(frozen=True)
class GpuFault:
    """One finding of a health check. ``critical`` faults cordon the GPU."""

    index: int
    kind: str  # xid, ecc, retired-pages, throttle, temperature, missing, ...
    detail: str
    critical: bool = True
    data: dict[str, object] = field(default_factory=dict)

    def describe(self) -> str:
        return f"GPU {self.index}: {self.kind}: {self.detail}"


class GpuProvider(Protocol):
    kind: str
    note: str

    def devices(self) -> list[GpuDevice]: ...

    def faults(self, indices: list[int]) -> list[GpuFault]: ...


class SimulatedGpuProvider:
    """N fake GPUs for tests and demos; faults come from AIR_SIMULATED_GPU_FAULTS."""

    kind = "simulated"

    def __init__(self, count: int) -> None:
        self.count = count
        self.note = f"{count} simulated GPUs (AIR_SIMULATED_GPUS={count})"

    def devices(self) -> list[GpuDevice]:
        return [
            GpuDevice(i, "Simulated GPU", 81920, f"GPU-sim-{i:04d}") for i in range(self.count)
        ]

    def faults(self, indices: list[int]) -> list[GpuFault]:
        from air_skills import health

        return health.simulated_faults(indices, self.count)


class NoGpuProvider:
    kind = "none"

    def __init__(self, note: str) -> None:
        self.note = note

    def devices(self) -> list[GpuDevice]:
        return []

    def faults(self, indices: list[int]) -> list[GpuFault]:
        return [GpuFault(i, "missing", "no GPU driver on this machine") for i in indices]


class NvmlGpuProvider:
    """Real GPUs through nvidia-ml-py."""

    kind = "nvml"

    def __init__(self, nvml: object, note: str) -> None:
        self.nvml = nvml
        self.note = note

    def devices(self) -> list[GpuDevice]:
        nv = self.nvml
        out = []
        for i in range(nv.nvmlDeviceGetCount()):  # type: ignore[attr-defined]
            h = nv.nvmlDeviceGetHandleByIndex(i)  # type: ignore[attr-defined]
            name = nv.nvmlDeviceGetName(h)  # type: ignore[attr-defined]
            mem = nv.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)  # type: ignore[attr-defined]
            uuid = nv.nvmlDeviceGetUUID(h)  # type: ignore[attr-defined]
            out.append(
                GpuDevice(
                    i,
                    name.decode() if isinstance(name, bytes) else name,
                    int(mem),
                    uuid.decode() if isinstance(uuid, bytes) else uuid,
                )
            )
        return out

    def faults(self, indices: list[int]) -> list[GpuFault]:
        from air_skills import health

        return health.nvml_faults(self.nvml, indices)


_provider: GpuProvider | None = None
_provider_key: str | None = None


def provider() -> GpuProvider:
    """The provider for this process (AIR_SIMULATED_GPUS wins over NVML)."""
    global _provider, _provider_key
    key = os.environ.get("AIR_SIMULATED_GPUS", "")
    if _provider is not None and _provider_key == key:
        return _provider
    _provider_key = key
    if key.strip():
        try:
            count = int(key)
            if count < 0 or count > 1024:
                raise ValueError
        except ValueError:
            _provider = NoGpuProvider(f"AIR_SIMULATED_GPUS={key!r} is not a count 0-1024")
        else:
            _provider = SimulatedGpuProvider(count)
        return _provider
    _provider = _nvml_provider()
    return _provider


def _nvml_provider() -> GpuProvider:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return NoGpuProvider("no GPUs: nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NoGpuProvider(f"no GPUs: NVML unavailable ({exc})")
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        version = "?"
    if isinstance(version, bytes):
        version = version.decode()
    return NvmlGpuProvider(pynvml, f"NVML, driver {version}")
