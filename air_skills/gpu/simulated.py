"""Simulated GPUs for tests and demos: N fake devices, faults injected from a JSON file.

``AIR_SIMULATED_GPUS=N`` selects this provider; ``AIR_SIMULATED_GPU_FAULTS`` names a JSON file,
re-read on every check::

    {"0": [{"kind": "xid", "code": 79}],
     "2": [{"kind": "throttle", "reasons": ["HW_THERMAL"], "after_s": 30}]}

Kinds and their fields (every entry may also have ``after_s``: it applies only that many
seconds after the file was last written):
``xid`` (code), ``ecc`` (count, default 1), ``retired-pages``, ``row-remap`` (pending,
default true; failure, default false), ``throttle`` (reasons: names, or mask: int),
``temperature`` (celsius), ``missing``, ``utilization`` (percent: a busy-time trace for the stall
watch; of the entries whose ``after_s`` has passed, the last listed wins); and two seen only by
the deep preflight:
``matmul-corrupt`` (its matmul then differs from the CPU result) and ``hang`` (the check
never finishes, as on a hung GPU).
A file that cannot be read or does not validate injects nothing; the check reports it as a
non-critical finding with index -1 (``air doctor`` shows it) and never raises.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.gpu.catalogue import THROTTLE_BITS
from air_skills.gpu.health import FAULTS_ENV, check_failed, faults_from_readings
from air_skills.gpu.types import GpuDevice, GpuFault, GpuReading

SIMULATED_BASELINE_C = 40.0
_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "xid": {"code": int},
    "ecc": {"count": int},
    "retired-pages": {},
    "row-remap": {"pending": bool, "failure": bool},
    "throttle": {"reasons": list, "mask": int},
    "temperature": {"celsius": (int, float)},
    "missing": {},
    "utilization": {"percent": (int, float)},
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
    pct = entry.get("percent")
    if kind == "utilization" and not (isinstance(pct, int | float) and 0 <= pct <= 100):
        problems.append(f"{where} (utilization): needs percent, 0-100")
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
        elif kind == "utilization":
            reading.utilization_pct = float(e["percent"])
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
    path = settings.raw(FAULTS_ENV)
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
    path = settings.raw(FAULTS_ENV)
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
    path = settings.raw(FAULTS_ENV)
    if not path:
        return set()
    try:
        by_gpu, mtime = load_faults_file(path)
    except FaultsFileError:
        return set()
    return {e["kind"] for e in active_entries(by_gpu.get(index, []), mtime)}


class SimulatedGpuProvider:
    """N fake GPUs for tests and demos; faults come from AIR_SIMULATED_GPU_FAULTS."""

    kind = "simulated"

    def __init__(self, count: int) -> None:
        self.count = count
        self.note = f"{count} simulated GPUs (AIR_SIMULATED_GPUS={count})"

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(i, "Simulated GPU", 81920, f"GPU-sim-{i:04d}") for i in range(self.count)]

    def readings(self, indices: list[int]) -> list[GpuReading]:
        return simulated_readings(indices, self.count)[0]

    def faults(self, indices: list[int]) -> list[GpuFault]:
        try:
            return simulated_faults(indices, self.count)
        except Exception as exc:  # a check must never take a supervisor down
            return check_failed(exc)
