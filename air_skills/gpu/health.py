"""GPU health: readings (NVML or simulated) translated into ``GpuFault`` by pure functions.

A check takes one ``GpuReading`` per GPU and turns it into faults with ``translate``; NVML
and the simulated provider fill the same reading, so both take the same translation path.

Critical (the GPU is cordoned and its job goes back to the queue):
  - the GPU missing or off the bus (NVML: GPU is lost);
  - Xid events in ``XID_CATALOGUE`` marked critical (48, 63, 64, 74, 79, 92, 94, 95, ...);
  - uncorrectable ECC errors since the driver loaded (volatile counter);
  - pages pending retirement, row remapping pending or failed;
  - the clock throttle reasons HW_SLOWDOWN, HW_THERMAL and HW_POWER_BRAKE;
  - a temperature over ``AIR_GPU_MAX_TEMP_C`` (default 90).
Benign: the throttle reasons GPU_IDLE, SW_POWER_CAP (and the other software or clock-setting
reasons); SW_THERMAL and Xids outside the critical list are reported, not cordoned.

Simulated faults: ``AIR_SIMULATED_GPU_FAULTS`` names a JSON file, re-read on every check::

    {"0": [{"kind": "xid", "code": 79}],
     "2": [{"kind": "throttle", "reasons": ["HW_THERMAL"], "after_s": 30}]}

Kinds and their fields (every entry may also have ``after_s``: it applies only that many
seconds after the file was last written):
``xid`` (code), ``ecc`` (count, default 1), ``retired-pages``, ``row-remap`` (pending,
default true; failure, default false), ``throttle`` (reasons: names, or mask: int),
``temperature`` (celsius), ``missing``; and two seen only by the deep preflight:
``matmul-corrupt`` (its matmul then differs from the CPU result) and ``hang`` (the check
never finishes, as on a hung GPU).
A file that cannot be read or does not validate injects nothing; the check reports it as a
non-critical finding with index -1 (``air doctor`` shows it) and never raises.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.gpu.providers import GpuFault

DEFAULT_MAX_TEMP_C = 90.0
FAULTS_ENV = "AIR_SIMULATED_GPU_FAULTS"
MAX_TEMP_ENV = "AIR_GPU_MAX_TEMP_C"

# --- catalogues ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class XidEntry:
    meaning: str
    critical: bool
    action: str


_RESET = "reset the GPU (nvidia-smi -r, or reboot); if it recurs, have the GPU serviced"

# From NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors). Critical ones mean the
# hardware (or its memory, link or firmware) failed; the others are usually the job's own bug.
XID_CATALOGUE: dict[int, XidEntry] = {
    8: XidEntry("GPU stopped processing (timeout)", False, "check the job; if it recurs, reset"),
    13: XidEntry(
        "graphics engine exception (usually the application's own fault)",
        False,
        "check the job's code (out-of-range access, illegal instruction)",
    ),
    31: XidEntry(
        "GPU memory page fault (usually the application's own fault)",
        False,
        "check the job's code for illegal memory access",
    ),
    32: XidEntry(
        "invalid or corrupted push buffer stream",
        False,
        "if it recurs without a job error, check the driver and PCIe bus",
    ),
    38: XidEntry("driver firmware error", True, _RESET),
    43: XidEntry(
        "GPU stopped processing (usually the application's own fault)",
        False,
        "check the job",
    ),
    45: XidEntry(
        "preemptive cleanup after a previous error", False, "look for an earlier Xid on this GPU"
    ),
    48: XidEntry("double-bit ECC error (uncorrectable memory error)", True, _RESET),
    61: XidEntry("internal micro-controller breakpoint or warning", True, _RESET),
    62: XidEntry("internal micro-controller halt", True, _RESET),
    63: XidEntry(
        "ECC page retirement or row remapping recorded",
        True,
        "reset the GPU to apply the retirement or remapping",
    ),
    64: XidEntry(
        "ECC page retirement or row remapping failed",
        True,
        "the GPU's memory cannot be repaired in the field: have it serviced",
    ),
    69: XidEntry("graphics engine class error", False, "if it recurs, reset the GPU"),
    74: XidEntry(
        "NVLink error",
        True,
        "check the links (nvidia-smi nvlink -s), reset the GPU; if it recurs, service",
    ),
    79: XidEntry(
        "GPU has fallen off the bus",
        True,
        "reboot the node; check power and PCIe seating if it recurs",
    ),
    92: XidEntry("high single-bit ECC error rate", True, _RESET),
    94: XidEntry(
        "contained ECC error (the application that touched the memory was stopped)",
        True,
        "reset the GPU when it is idle",
    ),
    95: XidEntry("uncontained ECC error (every application on the GPU is affected)", True, _RESET),
    119: XidEntry("GSP RPC timeout", True, _RESET + "; update the driver"),
    120: XidEntry("GSP error", True, _RESET + "; update the driver"),
    121: XidEntry("C2C (chip-to-chip) link error", True, _RESET),
    140: XidEntry("unrecovered ECC error", True, _RESET),
    154: XidEntry(
        "GPU recovery action changed: a reset or reboot is required", True, "reset or reboot"
    ),
}

CRITICAL_XIDS = frozenset(code for code, e in XID_CATALOGUE.items() if e.critical)

# Clock throttle ("clocks event") reasons: bits of nvmlDeviceGetCurrentClocksThrottleReasons.
THROTTLE_BITS: dict[str, int] = {
    "GPU_IDLE": 0x1,
    "APPLICATIONS_CLOCKS_SETTING": 0x2,
    "SW_POWER_CAP": 0x4,
    "HW_SLOWDOWN": 0x8,
    "SYNC_BOOST": 0x10,
    "SW_THERMAL": 0x20,
    "HW_THERMAL": 0x40,
    "HW_POWER_BRAKE": 0x80,
    "DISPLAY_CLOCK_SETTING": 0x100,
    "BOARD_LIMIT": 0x200,
    "RELIABILITY": 0x400,
}
CRITICAL_THROTTLE = ("HW_SLOWDOWN", "HW_THERMAL", "HW_POWER_BRAKE")
WARN_THROTTLE = ("SW_THERMAL",)

ADVICE: dict[str, str] = {
    "missing": "check `nvidia-smi` and the kernel log; reboot the node, reseat the GPU",
    "ecc": _RESET,
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


# --- readings and their translation (pure) -------------------------------------------------------


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
    raw = os.environ.get(MAX_TEMP_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_TEMP_C, None
    try:
        value = float(raw)
        if not 20 <= value <= 150:
            raise ValueError
    except ValueError:
        return DEFAULT_MAX_TEMP_C, (
            f"{MAX_TEMP_ENV}={raw!r} is not a temperature 20-150 °C; using {DEFAULT_MAX_TEMP_C:g}"
        )
    return value, None


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


# --- simulated faults -----------------------------------------------------------------------------

SIMULATED_BASELINE_C = 40.0
_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "xid": {"code": int},
    "ecc": {"count": int},
    "retired-pages": {},
    "row-remap": {"pending": bool, "failure": bool},
    "throttle": {"reasons": list, "mask": int},
    "temperature": {"celsius": (int, float)},
    "missing": {},
    "matmul-corrupt": {},
    "hang": {},
}
SIMULATED_KINDS = tuple(_FIELDS)


class FaultsFileError(ValueError):
    """The faults file cannot be read or does not validate; ``problems`` lists every one."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{FAULTS_ENV}={path}: " + "; ".join(problems))


def _check_entry(where: str, entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return [f'{where}: an entry must be an object like {{"kind": "xid", "code": 79}}']
    kind = entry.get("kind")
    if kind not in _FIELDS:
        return [f"{where}: unknown kind {kind!r} (kinds: {', '.join(SIMULATED_KINDS)})"]
    problems = []
    fields = _FIELDS[kind]
    for key, value in entry.items():
        if key == "kind":
            continue
        if key == "after_s":
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            if not ok:
                problems.append(f"{where} ({kind}): after_s must be a number of seconds >= 0")
            continue
        if key not in fields:
            valid = ", ".join([*fields, "after_s"])
            problems.append(f"{where} ({kind}): unknown field {key!r} (fields: {valid})")
            continue
        want = fields[key]
        if isinstance(value, bool) and want is not bool:
            ok = False
        else:
            ok = isinstance(value, want)
        if not ok:
            problems.append(f"{where} ({kind}): {key} has the wrong type: {value!r}")
    if kind == "xid" and "code" not in entry:
        problems.append(f"{where} (xid): needs a code, e.g. 79")
    if kind == "temperature" and "celsius" not in entry:
        problems.append(f"{where} (temperature): needs celsius, e.g. 95")
    if kind == "ecc" and isinstance(entry.get("count"), int) and entry["count"] < 1:
        problems.append(f"{where} (ecc): count must be >= 1")
    if kind == "throttle":
        reasons = entry.get("reasons")
        if ("reasons" in entry) == ("mask" in entry):
            problems.append(f"{where} (throttle): give reasons (names) or mask (int), not both")
        elif isinstance(reasons, list):
            bad = [r for r in reasons if r not in THROTTLE_BITS]
            if bad:
                problems.append(
                    f"{where} (throttle): unknown reasons {bad} (known: {', '.join(THROTTLE_BITS)})"
                )
    return problems


def load_faults_file(path: str) -> tuple[dict[int, list[dict[str, Any]]], float]:
    """The file's entries by GPU index, and its modification time. Raises FaultsFileError."""
    p = Path(path)
    try:
        text = p.read_text()
        mtime = p.stat().st_mtime
    except OSError as exc:
        raise FaultsFileError(path, [f"cannot read it: {exc.strerror or exc}"]) from None
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise FaultsFileError(path, [f"not valid JSON: {exc}"]) from None
    if not isinstance(raw, dict):
        raise FaultsFileError(
            path, ['must be an object keyed by GPU index: {"0": [{"kind": "xid", "code": 79}]}']
        )
    problems: list[str] = []
    out: dict[int, list[dict[str, Any]]] = {}
    for key, entries in raw.items():
        if not (isinstance(key, str) and key.isdigit()):
            problems.append(f'key {key!r} is not a GPU index (write "0", "1", ...)')
            continue
        if not isinstance(entries, list):
            problems.append(f"GPU {key}: must be a list of entries")
            continue
        for n, entry in enumerate(entries):
            problems.extend(_check_entry(f"GPU {key} entry {n}", entry))
        out[int(key)] = entries
    if problems:
        raise FaultsFileError(path, problems)
    return out, mtime


def active_entries(
    entries: list[dict[str, Any]], mtime: float, now: float | None = None
) -> list[dict[str, Any]]:
    """The entries whose ``after_s`` has passed since the file was written."""
    now = time.time() if now is None else now
    return [e for e in entries if now - mtime >= float(e.get("after_s", 0))]


def apply_entries(reading: GpuReading, entries: list[dict[str, Any]]) -> GpuReading:
    """Fold simulated entries into a reading, as NVML would have read them."""
    for e in entries:
        kind = e["kind"]
        if kind == "xid":
            reading.xids.append(int(e["code"]))
        elif kind == "ecc":
            reading.ecc_uncorrectable = (reading.ecc_uncorrectable or 0) + int(e.get("count", 1))
        elif kind == "retired-pages":
            reading.retired_pages_pending = True
        elif kind == "row-remap":
            corr, uncorr, pending, failure = reading.remapped_rows or (0, 0, False, False)
            reading.remapped_rows = (
                corr,
                uncorr + 1,
                pending or bool(e.get("pending", True)),
                failure or bool(e.get("failure", False)),
            )
        elif kind == "throttle":
            mask = int(e["mask"]) if "mask" in e else 0
            for name in e.get("reasons", []):
                mask |= THROTTLE_BITS[name]
            reading.throttle_mask = (reading.throttle_mask or 0) | mask
        elif kind == "temperature":
            reading.temperature_c = float(e["celsius"])
        elif kind == "missing":
            reading.present = False
            reading.missing_detail = "GPU is lost: it fell off the bus (simulated)"
    return reading


SIMULATED_CHECKS = ["presence", "Xid", "ECC", "retired pages", "row remap", "throttle", "temp"]


def simulated_baseline(index: int, count: int) -> GpuReading:
    if index < 0 or index >= count:
        return GpuReading(
            index, present=False, missing_detail=f"no GPU {index}: {count} simulated GPUs"
        )
    return GpuReading(
        index,
        ecc_uncorrectable=0,
        retired_pages_pending=False,
        remapped_rows=(0, 0, False, False),
        throttle_mask=0,
        temperature_c=SIMULATED_BASELINE_C,
        checked=list(SIMULATED_CHECKS),
    )


def faults_file_status() -> tuple[str | None, list[str], dict[int, list[dict[str, Any]]]]:
    """(path or None, problems, entries by GPU) for the faults file named in the environment."""
    path = os.environ.get(FAULTS_ENV, "").strip()
    if not path:
        return None, [], {}
    try:
        entries, _ = load_faults_file(path)
    except FaultsFileError as exc:
        return path, exc.problems, {}
    return path, [], entries


def simulated_readings(indices: list[int], count: int) -> tuple[list[GpuReading], list[GpuFault]]:
    """Readings of simulated GPUs with the faults file applied, and notes about the file."""
    readings = [simulated_baseline(i, count) for i in indices]
    path = os.environ.get(FAULTS_ENV, "").strip()
    if not path:
        return readings, []
    try:
        by_gpu, mtime = load_faults_file(path)
    except FaultsFileError as exc:
        # A bad faults file must not crash a supervisor: report it, inject nothing.
        note = GpuFault(-1, "faults-file", f"{exc}; no simulated faults injected", critical=False)
        return readings, [note]
    now = time.time()
    for r in readings:
        if r.present:
            apply_entries(r, active_entries(by_gpu.get(r.index, []), mtime, now))
    return readings, []


def simulated_faults(indices: list[int], count: int) -> list[GpuFault]:
    readings, notes = simulated_readings(indices, count)
    return notes + faults_from_readings(readings)


def simulated_deep_faults(index: int) -> set[str]:
    """Kinds injected for the deep preflight on one simulated GPU (e.g. ``matmul-corrupt``)."""
    path = os.environ.get(FAULTS_ENV, "").strip()
    if not path:
        return set()
    try:
        by_gpu, mtime = load_faults_file(path)
    except FaultsFileError:
        return set()
    return {e["kind"] for e in active_entries(by_gpu.get(index, []), mtime)}


# --- NVML ---------------------------------------------------------------------------------------

NVML_CHECKS = ["presence", "Xid", "ECC", "retired pages", "row remap", "throttle", "temp"]


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
    except _Lost:
        reading.present = False
        reading.missing_detail = "GPU is lost: it fell off the bus (NVML: GPU is lost)"
    return reading


def nvml_readings(nv: Any, indices: list[int], watcher: XidWatcher | None) -> list[GpuReading]:
    return [nvml_reading(nv, i, watcher) for i in indices]


def nvml_faults(nv: Any, indices: list[int], watcher: XidWatcher | None = None) -> list[GpuFault]:
    return faults_from_readings(nvml_readings(nv, indices, watcher))


# --- the pool, in words ---------------------------------------------------------------------------


def pool_notes(infos: list[Any]) -> list[str]:
    """Lines under `air gpus`: what is wrong with the pool, and what to do (GpuInfo list)."""
    lines = []
    path, problems, _ = faults_file_status()
    if problems:
        lines.append(
            f"warning: {FAULTS_ENV}={path} is invalid ({'; '.join(problems)}); no simulated"
            " faults are injected. `air doctor` for details"
        )
    for g in infos:
        if g.cordoned:
            lines.append(
                f"GPU {g.index} is cordoned: no job starts on it. After a fix, `air uncordon"
                f" {g.index}` (it re-runs the check first)"
            )
        elif g.health != "ok":
            lines.append(
                f"GPU {g.index} fails its check ({g.reason}): the next job's preflight on it"
                f" cordons it and starts the job elsewhere; `air cordon {g.index} --reason ...`"
                " takes it out now"
            )
    if infos and all(g.cordoned for g in infos):
        lines.append("every GPU is cordoned: GPU jobs wait in the queue (nothing is lost)")
    return lines
