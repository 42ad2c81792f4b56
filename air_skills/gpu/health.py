"""GPU health: readings (NVML or simulated) translated into ``GpuFault`` by pure functions.

A check takes one ``GpuReading`` per GPU and turns it into faults with ``translate``; NVML
(``air_skills.gpu.nvml``) and the simulated provider (``air_skills.gpu.simulated``) fill the
same reading, so both take the same translation path.

Critical (the GPU is cordoned and its job goes back to the queue):
  - the GPU missing or off the bus (NVML: GPU is lost);
  - Xid events in ``XID_CATALOGUE`` marked critical (48, 63, 64, 74, 79, 92, 94, 95, ...);
  - uncorrectable ECC errors since the driver loaded (volatile counter);
  - pages pending retirement, row remapping pending or failed;
  - the clock throttle reasons HW_SLOWDOWN, HW_THERMAL and HW_POWER_BRAKE;
  - a temperature over ``AIR_GPU_MAX_TEMP_C`` (default 90).
Benign: the throttle reasons GPU_IDLE, SW_POWER_CAP (and the other software or clock-setting
reasons); SW_THERMAL and Xids outside the critical list are reported, not cordoned.
"""

from __future__ import annotations

from air_skills import settings
from air_skills.gpu.catalogue import (
    CRITICAL_THROTTLE,
    RESET_ADVICE,
    THROTTLE_BITS,
    WARN_THROTTLE,
    XID_CATALOGUE,
)
from air_skills.gpu.types import GpuFault, GpuReading

DEFAULT_MAX_TEMP_C = 90.0
FAULTS_ENV = "AIR_SIMULATED_GPU_FAULTS"
MAX_TEMP_ENV = "AIR_GPU_MAX_TEMP_C"

ADVICE: dict[str, str] = {
    "missing": "check `nvidia-smi` and the kernel log; reboot the node, reseat the GPU",
    "ecc": RESET_ADVICE,
    "retired-pages": "reset the GPU (or reboot) so the pending pages are retired",
    "row-remap": "reset the GPU to apply pending remaps; a remap failure needs service",
    "throttle": "check cooling, fans and power supply: the hardware is holding the clocks down",
    "temperature": f"check cooling and airflow ({MAX_TEMP_ENV} sets the limit)",
    "nvml-error": "check the driver (`nvidia-smi`); the check could not read this value",
    "deep-preflight": "run `air doctor --deep`; reset the GPU, or service it if it recurs",
    "faults-file": f"fix the JSON file named by {FAULTS_ENV} (or unset it)",
    "config": "fix the environment variable",
    "check-error": "report this; the check itself failed",
}


def advice(fault: GpuFault) -> str:
    """What to do about a fault, in one line."""
    if fault.kind == "xid":
        code = fault.data.get("xid")
        entry = XID_CATALOGUE.get(code) if isinstance(code, int) else None
        return entry.action if entry else "look the Xid up in NVIDIA's Xid catalogue"
    if fault.kind == "throttle" and not fault.critical:
        return "check cooling: the driver slows the clocks to stay within its temperature limit"
    return ADVICE.get(fault.kind, "check the GPU")


def check_failed(exc: Exception) -> list[GpuFault]:
    """The note a provider returns when its check itself failed: a check never raises."""
    return [GpuFault(-1, "check-error", f"the health check failed: {exc!r}", critical=False)]


# --- readings and their translation (pure) -------------------------------------------------------


def missing_fault(index: int, detail: str = "") -> GpuFault:
    return GpuFault(index, "missing", detail or "GPU is not present (off the bus?)")


def xid_faults(index: int, codes: list[int]) -> list[GpuFault]:
    """One fault per distinct Xid; critical per the catalogue, unknown codes are reported only."""
    out = []
    for code in sorted(set(codes)):
        entry = XID_CATALOGUE.get(code)
        meaning = entry.meaning if entry else "not in AIR's catalogue (see NVIDIA's Xid list)"
        count = codes.count(code)
        times = f" (x{count})" if count > 1 else ""
        out.append(
            GpuFault(
                index,
                "xid",
                f"Xid {code}{times}: {meaning}",
                critical=bool(entry and entry.critical),
                data={"xid": code, "count": count},
            )
        )
    return out


def ecc_faults(index: int, uncorrectable: int | None) -> list[GpuFault]:
    if not uncorrectable:
        return []
    return [
        GpuFault(
            index,
            "ecc",
            f"{uncorrectable} uncorrectable ECC error(s) since the driver loaded",
            data={"uncorrectable": uncorrectable},
        )
    ]


def retired_pages_faults(index: int, pending: bool | None) -> list[GpuFault]:
    if not pending:
        return []
    return [GpuFault(index, "retired-pages", "memory pages pending retirement (reset needed)")]


def remap_faults(index: int, rows: tuple[int, int, bool, bool] | None) -> list[GpuFault]:
    """nvmlDeviceGetRemappedRows: (correctable, uncorrectable, pending, failure)."""
    if rows is None:
        return []
    corr, uncorr, pending, failure = rows
    data: dict[str, object] = {"correctable": corr, "uncorrectable": uncorr}
    out = []
    if failure:
        out.append(GpuFault(index, "row-remap", "row remapping failed (needs service)", data=data))
    if pending:
        out.append(GpuFault(index, "row-remap", "row remapping pending (reset needed)", data=data))
    return out


def throttle_names(mask: int) -> list[str]:
    """The names of the bits set in a throttle-reason mask, in bit order."""
    names = [name for name, bit in THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_BITS.values())
    if rest:
        names.append(f"0x{rest:x}")
    return names


def throttle_faults(index: int, mask: int | None) -> list[GpuFault]:
    """HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE: critical; SW_THERMAL: reported; others benign."""
    if not mask:
        return []
    names = throttle_names(mask)
    data: dict[str, object] = {"mask": mask, "reasons": names}
    critical = [n for n in CRITICAL_THROTTLE if n in names]
    if critical:
        detail = "hardware clock slowdown: " + ", ".join(critical)
        return [GpuFault(index, "throttle", detail, data=data)]
    warn = [n for n in WARN_THROTTLE if n in names]
    if warn:
        return [
            GpuFault(
                index,
                "throttle",
                "software thermal slowdown: " + ", ".join(warn),
                critical=False,
                data=data,
            )
        ]
    return []


def temperature_faults(index: int, celsius: float | None, max_c: float) -> list[GpuFault]:
    if celsius is None or celsius <= max_c:
        return []
    return [
        GpuFault(
            index,
            "temperature",
            f"{celsius:g} °C, over the {max_c:g} °C limit ({MAX_TEMP_ENV})",
            data={"celsius": celsius, "max_c": max_c},
        )
    ]


def translate(reading: GpuReading, max_temp_c: float = DEFAULT_MAX_TEMP_C) -> list[GpuFault]:
    """Every fault in one reading. Pure: same reading, same faults."""
    i = reading.index
    if not reading.present:
        return [missing_fault(i, reading.missing_detail)]
    return [
        *xid_faults(i, reading.xids),
        *ecc_faults(i, reading.ecc_uncorrectable),
        *retired_pages_faults(i, reading.retired_pages_pending),
        *remap_faults(i, reading.remapped_rows),
        *throttle_faults(i, reading.throttle_mask),
        *temperature_faults(i, reading.temperature_c, max_temp_c),
        *(GpuFault(i, "nvml-error", e, critical=False) for e in reading.errors),
    ]


def max_temp_c() -> tuple[float, str | None]:
    """The temperature limit and, if AIR_GPU_MAX_TEMP_C is bad, a problem line."""
    problem = settings.problem(MAX_TEMP_ENV)  # "...='hot' is not a temperature 20-150 °C"
    if problem:
        return DEFAULT_MAX_TEMP_C, f"{problem}; using {DEFAULT_MAX_TEMP_C:g}"
    return settings.get(MAX_TEMP_ENV), None


def config_notes() -> list[GpuFault]:
    """Non-critical findings about the checks' own settings (index -1)."""
    _, problem = max_temp_c()
    return [GpuFault(-1, "config", problem, critical=False)] if problem else []


def faults_from_readings(readings: list[GpuReading]) -> list[GpuFault]:
    limit, _ = max_temp_c()
    out = config_notes()
    for r in readings:
        out.extend(translate(r, limit))
    return out
