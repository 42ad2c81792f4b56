"""The GPU checks around a job's attempt: the preflight before its command starts (quick, then
deep when asked for or owed after an NCCL failure), and cordoning the GPUs found faulty."""

from __future__ import annotations

import time
from typing import Any

from air_skills.gpu.providers import GpuFault, provider
from air_skills.runtime.results import nccl
from air_skills.runtime.results.outcomes import InfraFailure
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store


def preflight(
    store: Store, row: JobRecord, spec: dict[str, Any], gpus: list[int]
) -> tuple[list[GpuFault], str]:
    """The faults that keep the command from starting, and which check found them ([] when
    none); problems of the check itself are noted as the job's events."""
    job_id = row.job_id
    checked = provider().faults(gpus) if gpus else []
    for note in dict.fromkeys(f.detail for f in checked if f.index < 0):
        store.event(job_id, "health-warning", f"GPU check problem: {note}")
    faults = [f for f in checked if f.critical and f.index >= 0]
    if faults:
        return faults, "preflight"
    if gpus and (spec.get("deep_preflight") or _after_nccl(store, row)):
        from air_skills.gpu.deep_check import deep_preflight_faults

        return deep_preflight_faults(gpus, row.log_path), "deep preflight"
    return [], ""


def _after_nccl(store: Store, row: JobRecord) -> bool:
    """Whether this attempt retries an NCCL failure: its GPUs get the deep check first."""
    return row.failure_kind == "infra" and nccl.retry_after_nccl(store.events(row.job_id))


def cordon(store: Store, job_id: str, faults: list[GpuFault], when: str) -> InfraFailure | None:
    """Cordon the faulty GPUs; the infra failure that they make, or None without faults."""
    if not faults:
        return None
    detail = "; ".join(f.describe() for f in faults)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for idx in sorted({f.index for f in faults}):
        reason = "; ".join(f"{f.kind}: {f.detail}" for f in faults if f.index == idx)
        store.cordon(idx, f"{reason} ({when}, job {job_id}, {stamp})", health="unhealthy")
    return InfraFailure(f"GPU fault {when} ({detail})", "gpu")
