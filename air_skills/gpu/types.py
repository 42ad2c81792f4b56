"""GPU value types shared by the providers, the health translation and their callers (a leaf)."""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass
class GpuReading:
    """What one check read from one GPU. ``None``: not read (not supported or failed)."""

    index: int
    present: bool = True
    missing_detail: str = ""
    xids: list[int] = field(default_factory=list)
    ecc_uncorrectable: int | None = None  # volatile: since the driver loaded
    retired_pages_pending: bool | None = None
    remapped_rows: tuple[int, int, bool, bool] | None = None  # corr, uncorr, pending, failure
    throttle_mask: int | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None  # busy time, % (stall evidence, never a fault)
    errors: list[str] = field(default_factory=list)  # values that could not be read, and why
    checked: list[str] = field(default_factory=list)  # the checks that ran

    def summary(self) -> str:
        """A short line for `air doctor`: temperature and the checks that ran."""
        if not self.present:
            return self.missing_detail or "not present"
        parts = []
        if self.temperature_c is not None:
            parts.append(f"{self.temperature_c:g} °C")
        if self.checked:
            parts.append("checked " + ", ".join(self.checked))
        return "; ".join(parts)
