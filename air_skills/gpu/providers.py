"""GPU inventory: NVML on real machines, a simulated pool when AIR_SIMULATED_GPUS=N is set.

Health checks (Xid, ECC, throttling, ...) live in ``air_skills.gpu.health``; this module answers
"which GPUs are there", and each provider reads health values (``readings``) that
``health.translate`` turns into faults (``faults``). A check never raises: a failure of the
check itself comes back as a non-critical fault with index -1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from air_skills.gpu.health import GpuReading, XidWatcher


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
    kind: str  # nvml | simulated | none
    note: str  # one line for people: what this provider is, or why there are no GPUs

    def devices(self) -> list[GpuDevice]: ...

    def readings(self, indices: list[int]) -> list[GpuReading]: ...

    def faults(self, indices: list[int]) -> list[GpuFault]:
        """Faults on these GPUs, plus notes (index -1) about the check itself. Never raises."""
        ...


def _check_failed(exc: Exception) -> list[GpuFault]:
    return [GpuFault(-1, "check-error", f"the health check failed: {exc!r}", critical=False)]


class SimulatedGpuProvider:
    """N fake GPUs for tests and demos; faults come from AIR_SIMULATED_GPU_FAULTS."""

    kind = "simulated"

    def __init__(self, count: int) -> None:
        self.count = count
        self.note = f"{count} simulated GPUs (AIR_SIMULATED_GPUS={count})"

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(i, "Simulated GPU", 81920, f"GPU-sim-{i:04d}") for i in range(self.count)]

    def readings(self, indices: list[int]) -> list[GpuReading]:
        from air_skills.gpu import health

        return health.simulated_readings(indices, self.count)[0]

    def faults(self, indices: list[int]) -> list[GpuFault]:
        from air_skills.gpu import health

        try:
            return health.simulated_faults(indices, self.count)
        except Exception as exc:  # a check must never take a supervisor down
            return _check_failed(exc)


class NoGpuProvider:
    """No GPUs: NVML missing or unusable, or AIR_SIMULATED_GPUS not a count. ``note`` says why."""

    kind = "none"

    def __init__(self, note: str) -> None:
        self.note = note

    def devices(self) -> list[GpuDevice]:
        return []

    def readings(self, indices: list[int]) -> list[GpuReading]:
        from air_skills.gpu.health import GpuReading

        return [GpuReading(i, present=False, missing_detail=self.note) for i in indices]

    def faults(self, indices: list[int]) -> list[GpuFault]:
        return [GpuFault(i, "missing", self.note) for i in indices]


class NvmlGpuProvider:
    """Real GPUs through nvidia-ml-py."""

    kind = "nvml"

    def __init__(self, nvml: Any, note: str) -> None:
        self.nvml = nvml
        self.note = note
        self._watcher: XidWatcher | None = None

    def devices(self) -> list[GpuDevice]:
        nv = self.nvml
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError:
            return []
        out = []
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                name = _text(nv.nvmlDeviceGetName(h))
                mem = nv.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
                uuid = _text(nv.nvmlDeviceGetUUID(h))
            except nv.NVMLError as exc:
                # Still listed, so that it shows (and fails its checks) instead of vanishing.
                out.append(GpuDevice(i, f"unreadable GPU ({exc})", 0))
                continue
            out.append(GpuDevice(i, name, int(mem), uuid))
        return out

    @property
    def watcher(self) -> XidWatcher:
        if self._watcher is None:
            from air_skills.gpu.health import XidWatcher

            self._watcher = XidWatcher(self.nvml)
        return self._watcher

    def readings(self, indices: list[int]) -> list[GpuReading]:
        from air_skills.gpu import health

        return health.nvml_readings(self.nvml, indices, self.watcher)

    def faults(self, indices: list[int]) -> list[GpuFault]:
        from air_skills.gpu import health

        try:
            return health.nvml_faults(self.nvml, indices, self.watcher)
        except Exception as exc:  # a check must never take a supervisor down
            return _check_failed(exc)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
