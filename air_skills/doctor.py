"""`air doctor`: what this machine offers (GPUs, health, AIR_HOME, versions) and what to fix."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import TYPE_CHECKING, Any

from air_skills.gpus import provider

if TYPE_CHECKING:
    from air_skills.client import Client


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_doctor(client: Client, deep: bool = False) -> dict[str, Any]:
    checks: list[dict[str, Any]] = []

    def add(name: str, status: str, detail: str, next_: str = "") -> None:
        checks.append({"name": name, "status": status, "detail": detail, "next": next_})

    prov = provider()
    devices = prov.devices()
    if devices:
        add("gpus", "ok", f"{len(devices)} GPU(s): {prov.note}")
    else:
        add(
            "gpus",
            "warn",
            prov.note,
            "CPU jobs (gpus: 0) run; set AIR_SIMULATED_GPUS=N to try GPU scheduling",
        )
    infos = client.gpus()
    for gpu in infos:
        faults = [f for f in prov.faults([gpu.index]) if f.index == gpu.index]
        if gpu.cordoned:
            add(
                f"gpu {gpu.index}",
                "fail",
                f"cordoned: {gpu.reason}",
                f"fix the GPU, then `air uncordon {gpu.index}`",
            )
        elif any(f.critical for f in faults):
            add(
                f"gpu {gpu.index}",
                "fail",
                "; ".join(f"{f.kind}: {f.detail}" for f in faults),
                f"`air cordon {gpu.index} --reason ...` and check the GPU",
            )
        elif faults:
            add(f"gpu {gpu.index}", "warn", "; ".join(f"{f.kind}: {f.detail}" for f in faults))
        else:
            add(f"gpu {gpu.index}", "ok", f"{gpu.name}, {gpu.memory_mb} MiB, healthy")
    bad_file = [f for f in prov.faults([]) if f.kind == "faults-file"]
    for f in bad_file:
        add("faults file", "fail", f.detail, "fix the JSON in AIR_SIMULATED_GPU_FAULTS")
    if deep:
        from air_skills.preflight import deep_check

        for result in deep_check([g.index for g in infos if not g.cordoned]):
            add(result["name"], result["status"], result["detail"], result.get("next", ""))
    add("air_home", "ok", f"{client.home} (writable)")
    from air_skills.tracking import tracking_uri

    add("mlflow", "ok", f"tracking store {tracking_uri(client.home)}")
    versions = {
        "python": sys.version.split()[0],
        **{d: _version(d) for d in ("air-skills", "mlflow", "mcp", "ray", "torch", "optuna")},
    }
    add("versions", "ok", ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    add("cpu", "ok", f"{os.cpu_count()} cores; jobs get thread caps (OMP_NUM_THREADS, ...)")
    worst = "fail" if any(c["status"] == "fail" for c in checks) else "ok"
    return {"status": worst, "checks": checks, "versions": versions, "home": str(client.home)}
