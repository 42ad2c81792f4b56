"""The GPU table that `air gpus` and MCP list_gpus show: devices, health, cordons, holders."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from air_skills.gpu.providers import provider
from air_skills.models import GpuInfo

if TYPE_CHECKING:
    from air_skills.runtime.store.records import JobRecord


def gpu_table(cordons: Mapping[int, Any], running: Iterable[JobRecord]) -> list[GpuInfo]:
    """Each GPU of this machine with its health, cordon and the local jobs on it.

    ``cordons``: the store's GPU rows by index; ``running``: its running local jobs' records.
    Health is the stored verdict (unhealthy from a failed check until uncordoned) or a
    critical fault that the check finds now.
    """
    holders: dict[int, list[str]] = {}
    held_by: dict[int, JobRecord] = {}
    for r in running:
        for g in r.gpu_list():
            holders.setdefault(g, []).append(r.job_id)
            held_by[g] = r
    devices = provider().devices()
    failing: dict[int, list[str]] = {}
    for f in provider().faults([d.index for d in devices]):
        if f.critical and f.index >= 0:
            failing.setdefault(f.index, []).append(f"{f.kind}: {f.detail}")
    out = []
    for d in devices:
        c = cordons.get(d.index)
        cordoned = bool(c and c["cordoned"])
        now_failing = "; ".join(failing.get(d.index, [])) or None
        out.append(
            GpuInfo(
                index=d.index,
                name=d.name,
                memory_mb=d.memory_mb,
                health="unhealthy" if now_failing else (c["health"] if c else "ok"),
                cordoned=cordoned,
                reason=(c["reason"] if cordoned else None) or now_failing,
                job_ids=holders.get(d.index, []),
                project=held_by[d.index].project if d.index in held_by else None,
                borrowing=bool(d.index in held_by and held_by[d.index].borrowing),
            )
        )
    return out
