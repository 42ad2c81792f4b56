"""AIR_HOME's Ray settings, and ``python -m air_skills.backends.ray config|check``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from air_skills.backends.ray.backend import RayBackend
from air_skills.backends.ray.cluster import cluster_view
from air_skills.backends.ray.sdk import connect, env_address
from air_skills.errors import AirError, InvalidInput, render_json, render_text
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.store.store import Store

SETTINGS = ("backend", "ray_address", "ray_job_root", "ray_max_node_gpus")


def configure(
    store: Store,
    *,
    backend: str | None = None,
    address: str | None = None,
    job_root: str | None = None,
    max_node_gpus: int | None = None,
) -> dict[str, str | None]:
    """Save AIR_HOME's Ray settings (an empty string clears one); returns them all."""
    problems = []
    if backend is not None and backend not in ("local", "ray", "slurm", ""):
        problems.append(f"backend: {backend!r} is not local, ray or slurm")
    if job_root and not job_root.startswith("/"):
        problems.append(f"job root: {job_root!r} must be an absolute path on the cluster's nodes")
    if max_node_gpus is not None and max_node_gpus < 0:
        problems.append("max node gpus: must be >= 0")
    if problems:
        raise InvalidInput("bad settings: " + "; ".join(problems), hint="fix them and run again")
    values = {
        "backend": backend,
        "ray_address": address,
        "ray_job_root": job_root,
        "ray_max_node_gpus": None if max_node_gpus is None else str(max_node_gpus or ""),
    }
    for key, value in values.items():
        if value is not None:
            store.set_setting(key, value)  # "" reads as unset everywhere
    return {key: store.setting(key) or None for key in SETTINGS}


def main(argv: list[str] | None = None) -> int:
    """``python -m air_skills.backends.ray config [--backend B] [--address URL] ...``"""
    parser = argparse.ArgumentParser(
        prog="python -m air_skills.backends.ray",
        description="AIR Skills' Ray settings, saved in AIR_HOME (RAY_ADDRESS still wins).",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    cfg = sub.add_parser("config", help="show or change the settings")
    cfg.add_argument("--backend", help="default backend for specs that name none: local | ray")
    cfg.add_argument("--address", help="the cluster's dashboard, e.g. http://HEAD:8265")
    cfg.add_argument("--job-root", help="per-job folders on the nodes (shared storage)")
    cfg.add_argument("--max-node-gpus", type=int, help="GPUs of the largest node (autoscaling)")
    cfg.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("check", help="connect to the cluster and show its resources")
    args = parser.parse_args(argv)
    try:
        runtime = LaunchContext()
        if args.cmd == "config":
            result: Any = configure(
                runtime.store,
                backend=args.backend,
                address=args.address,
                job_root=args.job_root,
                max_node_gpus=args.max_node_gpus,
            )
            if args.json:
                print(json.dumps(result))
            else:
                for key, value in result.items():
                    print(f"{key}: {value if value is not None else '(not set)'}")
                if env_address():
                    print(f"(RAY_ADDRESS={env_address()} is set and wins over ray_address)")
        else:
            ray = connect(RayBackend(runtime).address())
            view = cluster_view(ray)
            print(f"{ray.get_address()}: {view.describe()}; on this host: {view.on_this_host}")
    except AirError as exc:
        shown = render_json(exc) if getattr(args, "json", False) else render_text(exc)
        print(shown, file=sys.stderr)
        return exc.exit_code
    return 0
