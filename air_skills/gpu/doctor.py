"""`air doctor`'s report: what the machine offers (GPUs, health, AIR_HOME, versions), what to fix.

Each check is ``{name, status (ok | warn | fail), detail, next}``; ``next`` says what to do.
The report's ``status`` is the worst of them. ``deep`` adds the torch check of
``air_skills.gpu.deep_check`` on every GPU that is not cordoned. The report is a function of
what the caller read (the GPU pool, recent infra events, the tracking store's check);
``air_skills.cli.doctor`` reads them.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from air_skills import settings
from air_skills.gpu import health, simulated
from air_skills.gpu.providers import GpuProvider
from air_skills.gpu.types import GpuFault

if TYPE_CHECKING:
    from air_skills.models import GpuInfo

Add = Callable[..., None]
RANK = {"ok": 0, "warn": 1, "fail": 2}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def doctor_report(
    prov: GpuProvider,
    infos: list[GpuInfo],
    home: Path,
    *,
    requeued_infra: Sequence[Any],
    cordons: Sequence[Any],
    max_infra_retries: int,
    tracking: tuple[str, str, str] | None = None,
    deep: bool = False,
) -> dict[str, Any]:
    """The report over the GPU pool ``infos`` (as ``Client.gpus``), the last 24 h of
    ``requeued-infra`` and ``cordon`` events (rows with ``job_id`` and ``message``) and the
    tracking store's check (``(status, detail, next)`` of ``air_skills.tracking.store_check``)."""
    checks: list[dict[str, Any]] = []

    def add(name: str, status: str, detail: str, next_: str = "") -> None:
        checks.append({"name": name, "status": status, "detail": detail, "next": next_})

    _check_gpus(prov, infos, add)
    _check_faults_file(add)
    _check_settings(add, max_infra_retries)
    _check_infra_history(requeued_infra, cordons, add)
    if deep:
        from air_skills.gpu.deep_check import deep_check

        for result in deep_check([g.index for g in infos if not g.cordoned]):
            add(result["name"], result["status"], result["detail"], result.get("next", ""))
    add("air_home", "ok", f"{home} (writable)")
    if tracking is not None:
        add("mlflow", *tracking)
    versions = {
        "python": sys.version.split()[0],
        **{d: _version(d) for d in ("air-skills", "mlflow", "mcp", "ray", "torch", "optuna")},
    }
    add("versions", "ok", ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    add("cpu", "ok", f"{os.cpu_count()} cores; jobs get thread caps (OMP_NUM_THREADS, ...)")
    worst = max((c["status"] for c in checks), key=RANK.__getitem__, default="ok")
    return {"status": worst, "checks": checks, "versions": versions, "home": str(home)}


def _faults_text(faults: list[GpuFault]) -> str:
    return "; ".join(f"{f.kind}: {f.detail}" for f in faults)


def _check_gpus(prov: GpuProvider, infos: list[GpuInfo], add: Add) -> None:
    if not infos:
        add(
            "gpus",
            "warn",
            f"no GPUs: {prov.note}",
            "CPU jobs (gpus: 0) run; on a GPU machine install the NVIDIA driver;"
            " set AIR_SIMULATED_GPUS=N to try GPU scheduling without GPUs",
        )
        return
    add("gpus", "ok", f"{len(infos)} GPU(s): {prov.note}")
    indices = [g.index for g in infos]
    try:
        readings = {r.index: r for r in prov.readings(indices)}
    except Exception as exc:  # the report goes on without the readings
        add("gpu readings", "fail", f"cannot read GPU health: {exc!r}", "check `nvidia-smi`")
        readings = {}
    limit, _ = health.max_temp_c()
    for gpu in infos:
        reading = readings.get(gpu.index)
        faults = health.translate(reading, limit) if reading else []
        critical = [f for f in faults if f.critical]
        notes = [f for f in faults if not f.critical]
        name = f"gpu {gpu.index}"
        what = f"{gpu.name}, {gpu.memory_mb // 1024} GiB"
        if reading is not None and reading.temperature_c is not None:
            what += f", {reading.temperature_c:g} °C"
        if gpu.job_ids:
            what += f", running {', '.join(gpu.job_ids)}"
        checked = f" (checked {', '.join(reading.checked)})" if reading and reading.checked else ""
        advice = "; ".join(dict.fromkeys(health.advice(f) for f in critical + notes))
        if gpu.cordoned and critical:
            add(
                name,
                "fail",
                f"cordoned ({gpu.reason}); still failing: {_faults_text(critical)}",
                f"{advice}; then `air uncordon {gpu.index}` (it re-runs the check)",
            )
        elif gpu.cordoned:
            add(
                name,
                "warn",
                f"cordoned ({gpu.reason}); its check passes now ({what})",
                f"`air uncordon {gpu.index}` brings it back",
            )
        elif critical:
            add(
                name,
                "fail",
                f"failing: {_faults_text(critical)}; the next job's preflight on it cordons it"
                " and starts the job elsewhere",
                f"{advice}; or take it out now: `air cordon {gpu.index} --reason ...`",
            )
        elif notes:
            add(name, "warn", f"{what}; {_faults_text(notes)}", advice)
        else:
            add(name, "ok", f"{what}: healthy{checked}")
    if all(g.cordoned for g in infos):
        add(
            "gpu pool",
            "fail",
            f"every GPU ({len(infos)}) is cordoned: GPU jobs wait in the queue (nothing is lost)",
            "fix a GPU and `air uncordon GPU` (or `--force` to override a failing check)",
        )


def _check_faults_file(add: Add) -> None:
    path, problems, entries = simulated.faults_file_status()
    if path is None:
        return
    if problems:
        add(
            "faults file",
            "fail",
            f"{health.FAULTS_ENV}={path}: " + "; ".join(problems) + ". No simulated faults are"
            " injected while it is invalid; the GPU checks go on without them",
            f"fix the file (kinds: {', '.join(simulated.SIMULATED_KINDS)}) or unset"
            f" {health.FAULTS_ENV}",
        )
        return
    n = sum(len(v) for v in entries.values())
    on = ", ".join(str(i) for i in sorted(entries) if entries[i]) or "none"
    add("faults file", "ok", f"{health.FAULTS_ENV}={path}: {n} simulated fault(s), on GPUs {on}")


def _check_settings(add: Add, max_infra_retries: int) -> None:
    limit, problem = health.max_temp_c()
    bad_interval = settings.problem("AIR_HEALTH_INTERVAL_S")  # "...='x' is not a number ..."
    if bad_interval:
        add("health settings", "fail", bad_interval, "set it to e.g. 5, or unset it")
        return
    interval = settings.get("AIR_HEALTH_INTERVAL_S")
    detail = (
        f"preflight on a job's GPUs before it starts, then every {interval:g}s while it runs"
        f" (Xid, ECC, retired pages, row remap, throttle, temperature <= {limit:g} °C);"
        f" a job is restarted elsewhere after up to {max_infra_retries} infra failures"
    )
    if problem:
        add("health settings", "warn", f"{problem}; {detail}", f"fix {health.MAX_TEMP_ENV}")
    else:
        add("health settings", "ok", detail)


def _check_infra_history(rows: Sequence[Any], cordons: Sequence[Any], add: Add) -> None:
    if not rows and not cordons:
        add("infra failures", "ok", "none in the last 24 h")
        return
    latest = rows[-1] if rows else None
    detail = f"{len(rows)} job restart(s) after GPU or host faults, {len(cordons)} cordon(s)"
    if latest is not None:
        detail += f"; latest: {latest['job_id']}: {latest['message']}"
    add("infra failures", "warn", detail + " (last 24 h)", "see `air gpus`")


# --- the pool, in words ---------------------------------------------------------------------------


def pool_notes(infos: list[Any]) -> list[str]:
    """Lines under `air gpus`: what is wrong with the pool, and what to do (GpuInfo list)."""
    lines = []
    path, problems, _ = simulated.faults_file_status()
    if problems:
        lines.append(
            f"warning: {health.FAULTS_ENV}={path} is invalid ({'; '.join(problems)}); no simulated"
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
