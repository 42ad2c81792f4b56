"""Real GPUs through NVML (nvidia-ml-py): devices, health readings and Xid events.

Each check reads a ``GpuReading`` per GPU; ``air_skills.gpu.health`` translates it into faults.
"""

from __future__ import annotations

from typing import Any

from air_skills.gpu.health import check_failed, faults_from_readings
from air_skills.gpu.types import GpuDevice, GpuFault, GpuReading


class XidWatcher:
    """Xid events since the last check, through one NVML event set per process.

    NVML delivers an event only to sets registered before it happened, so the first check in
    a process registers and sees nothing; the supervisor's preflight registers, and its polls
    while the job runs see every Xid from then on.
    """

    def __init__(self, nvml: Any) -> None:
        self.nv = nvml
        self.event_set: Any = None
        self.registered: dict[int, bool] = {}  # index -> registered (False: not supported)
        self.pending: dict[int, list[int]] = {}

    def register(self, index: int, handle: Any) -> bool:
        if index in self.registered:
            return self.registered[index]
        nv = self.nv
        try:
            if self.event_set is None:
                self.event_set = nv.nvmlEventSetCreate()
            supported = nv.nvmlDeviceGetSupportedEventTypes(handle)
            if not supported & nv.nvmlEventTypeXidCriticalError:
                self.registered[index] = False
                return False
            nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self.event_set)
        except nv.NVMLError:
            self.registered[index] = False
            return False
        self.registered[index] = True
        return True

    def drain(self) -> None:
        """Move every waiting event into ``pending`` (never blocks)."""
        nv = self.nv
        if self.event_set is None:
            return
        for _ in range(1000):
            try:
                data = nv.nvmlEventSetWait_v2(self.event_set, 0)
            except nv.NVMLError:  # NVMLError_Timeout: nothing more waiting
                return
            if data.eventType != nv.nvmlEventTypeXidCriticalError:
                continue
            try:
                index = nv.nvmlDeviceGetIndex(data.device)
            except nv.NVMLError:
                continue
            self.pending.setdefault(index, []).append(int(data.eventData))

    def take(self, index: int) -> list[int]:
        return self.pending.pop(index, [])


def _nvml_error_kind(nv: Any, exc: Exception) -> str:
    """``lost``, ``unsupported``, ``absent`` or ``error`` for an NVMLError."""
    value = getattr(exc, "value", None)
    if value == nv.NVML_ERROR_GPU_IS_LOST:
        return "lost"
    if value in (nv.NVML_ERROR_NOT_SUPPORTED, getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", -1)):
        return "unsupported"
    if value in (
        nv.NVML_ERROR_INVALID_ARGUMENT,
        nv.NVML_ERROR_NOT_FOUND,
        getattr(nv, "NVML_ERROR_GPU_NOT_FOUND", -1),
    ):
        return "absent"
    return "error"


class _Lost(Exception):
    pass


def _throttle_reasons(nv: Any, handle: Any) -> int:
    """The clocks event (throttle) reasons; the older call where the driver lacks the new one."""
    new = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if new is not None:
        try:
            return int(new(handle))
        except nv.NVMLError as exc:
            if exc.value != getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", -1):
                raise
    return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def nvml_reading(nv: Any, index: int, watcher: XidWatcher | None = None) -> GpuReading:
    """Read one GPU's health values through NVML. Never raises an NVMLError."""
    reading = GpuReading(index)
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as exc:
        kind = _nvml_error_kind(nv, exc)
        reading.present = False
        if kind == "lost":
            reading.missing_detail = "GPU is lost: it fell off the bus (NVML: GPU is lost)"
        elif kind == "absent":
            reading.missing_detail = f"NVML does not see GPU {index} ({exc})"
        else:
            reading.missing_detail = f"NVML cannot open GPU {index} ({exc})"
        return reading

    def read(name: str, fn: Any, *args: Any) -> Any:
        try:
            value = fn(*args)
        except nv.NVMLError as exc:
            kind = _nvml_error_kind(nv, exc)
            if kind == "lost":
                raise _Lost() from None
            if kind != "unsupported":
                reading.errors.append(f"cannot read {name}: {exc}")
            return None
        except Exception as exc:  # a binding or driver oddity: note it, read the rest
            reading.errors.append(f"cannot read {name}: {exc!r}")
            return None
        reading.checked.append(name)
        return value

    try:
        read("presence", nv.nvmlDeviceGetUUID, handle)
        if watcher is not None:
            watcher.drain()
            if watcher.register(index, handle):
                reading.checked.append("Xid")
                reading.xids = watcher.take(index)
        reading.ecc_uncorrectable = read(
            "ECC",
            nv.nvmlDeviceGetTotalEccErrors,
            handle,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_VOLATILE_ECC,
        )
        pending = read("retired pages", nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        reading.retired_pages_pending = None if pending is None else bool(pending)
        rows = read("row remap", nv.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            corr, uncorr, is_pending, failure = rows
            reading.remapped_rows = (int(corr), int(uncorr), bool(is_pending), bool(failure))
        reading.throttle_mask = read("throttle", _throttle_reasons, nv, handle)
        temp = read("temp", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
        reading.temperature_c = None if temp is None else float(temp)
        try:  # evidence for the stall watch, never a health finding: read apart
            reading.utilization_pct = float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:
            reading.utilization_pct = None
    except _Lost:
        reading.present = False
        reading.missing_detail = "GPU is lost: it fell off the bus (NVML: GPU is lost)"
    return reading


def nvml_readings(nv: Any, indices: list[int], watcher: XidWatcher | None) -> list[GpuReading]:
    return [nvml_reading(nv, i, watcher) for i in indices]


def nvml_faults(nv: Any, indices: list[int], watcher: XidWatcher | None = None) -> list[GpuFault]:
    return faults_from_readings(nvml_readings(nv, indices, watcher))


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
            self._watcher = XidWatcher(self.nvml)
        return self._watcher

    def readings(self, indices: list[int]) -> list[GpuReading]:
        return nvml_readings(self.nvml, indices, self.watcher)

    def minor_numbers(self, indices: list[int]) -> list[int]:
        """Each GPU's device node number (``/dev/nvidiaN``); the index where NVML cannot say."""
        nv = self.nvml
        out = []
        for i in indices:
            try:
                out.append(int(nv.nvmlDeviceGetMinorNumber(nv.nvmlDeviceGetHandleByIndex(i))))
            except Exception:
                out.append(i)
        return out

    def faults(self, indices: list[int]) -> list[GpuFault]:
        try:
            return nvml_faults(self.nvml, indices, self.watcher)
        except Exception as exc:  # a check must never take a supervisor down
            return check_failed(exc)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
