"""GPU health checks: simulated faults from AIR_SIMULATED_GPU_FAULTS, and NVML readings.

The faults file is JSON: ``{"<gpu index>": [{"kind": "xid", "code": 79, "after_s": 0}, ...]}``
and is re-read on every check. ``after_s`` counts from the file's modification time.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from air_skills.gpus import GpuFault


def simulated_faults(indices: list[int], count: int) -> list[GpuFault]:
    out: list[GpuFault] = []
    for i in indices:
        if i >= count:
            out.append(GpuFault(i, "missing", "GPU is not present (off the bus?)"))
    path = os.environ.get("AIR_SIMULATED_GPU_FAULTS")
    if not path:
        return out
    try:
        p = Path(path)
        raw = json.loads(p.read_text())
        mtime = p.stat().st_mtime
    except (OSError, ValueError) as exc:
        # A bad faults file must not crash a supervisor: report it, fault nothing.
        out.append(
            GpuFault(-1, "faults-file", f"cannot read {path}: {exc}", critical=False)
        )
        return out
    if not isinstance(raw, dict):
        return out
    now = time.time()
    for i in indices:
        for entry in raw.get(str(i), []) or []:
            if not isinstance(entry, dict):
                continue
            if now - mtime < float(entry.get("after_s", 0) or 0):
                continue
            kind = str(entry.get("kind", "xid"))
            detail = str(entry.get("detail") or entry.get("code") or kind)
            out.append(GpuFault(i, kind, detail, bool(entry.get("critical", True)), dict(entry)))
    return out


def nvml_faults(nvml: object, indices: list[int]) -> list[GpuFault]:
    return []
