"""GPU inventory: which provider answers "which GPUs are there" in this process, and its protocol.

NVML (``air_skills.gpu.nvml``) on real machines, a simulated pool (``air_skills.gpu.simulated``)
when AIR_SIMULATED_GPUS=N is set, none otherwise. Each provider reads health values
(``readings``) that ``air_skills.gpu.health.translate`` turns into faults (``faults``). A check
never raises: a failure of the check itself comes back as a non-critical fault with index -1.
"""

from __future__ import annotations

from typing import Any, Protocol

from air_skills import settings
from air_skills.gpu.nvml import NvmlGpuProvider
from air_skills.gpu.simulated import SimulatedGpuProvider
from air_skills.gpu.types import GpuDevice, GpuFault, GpuReading

# Re-exported: callers name the value types and providers through this module.
__all__ = [
    "GpuDevice",
    "GpuFault",
    "GpuProvider",
    "GpuReading",
    "NoGpuProvider",
    "NvmlGpuProvider",
    "SimulatedGpuProvider",
    "provider",
]


class GpuProvider(Protocol):
    kind: str  # nvml | simulated | none
    note: str  # one line for people: what this provider is, or why there are no GPUs

    def devices(self) -> list[GpuDevice]: ...

    def readings(self, indices: list[int]) -> list[GpuReading]: ...

    def faults(self, indices: list[int]) -> list[GpuFault]:
        """Faults on these GPUs, plus notes (index -1) about the check itself. Never raises."""
        ...


class NoGpuProvider:
    """No GPUs: NVML missing or unusable, or AIR_SIMULATED_GPUS not a count. ``note`` says why."""

    kind = "none"

    def __init__(self, note: str) -> None:
        self.note = note

    def devices(self) -> list[GpuDevice]:
        return []

    def readings(self, indices: list[int]) -> list[GpuReading]:
        return [GpuReading(i, present=False, missing_detail=self.note) for i in indices]

    def faults(self, indices: list[int]) -> list[GpuFault]:
        return [GpuFault(i, "missing", self.note) for i in indices]


_provider: GpuProvider | None = None
_provider_key: str | None = None


def provider() -> GpuProvider:
    """The provider for this process (AIR_SIMULATED_GPUS wins over NVML)."""
    global _provider, _provider_key
    key = settings.raw("AIR_SIMULATED_GPUS")
    if _provider is not None and _provider_key == key:
        return _provider
    _provider_key = key
    if key:
        problem = settings.problem("AIR_SIMULATED_GPUS")  # "...='x' is not a count 0-1024"
        count = settings.get("AIR_SIMULATED_GPUS")
        _provider = NoGpuProvider(problem) if problem else SimulatedGpuProvider(count)
        return _provider
    _provider = _nvml_provider()
    return _provider


def _nvml_provider(nvml: Any = None) -> GpuProvider:
    """NVML if it loads and sees GPUs; else a NoGpuProvider whose note says plainly why."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return NoGpuProvider("nvidia-ml-py is not installed")
    pynvml = nvml
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NoGpuProvider(f"NVML unavailable ({exc}): no NVIDIA driver loaded here")
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        version = "?"
    if isinstance(version, bytes):
        version = version.decode()
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:
        return NoGpuProvider(f"NVML (driver {version}) cannot count GPUs ({exc})")
    if count == 0:
        return NoGpuProvider(f"NVML (driver {version}) sees no GPU")
    return NvmlGpuProvider(pynvml, f"NVML, driver {version}")
