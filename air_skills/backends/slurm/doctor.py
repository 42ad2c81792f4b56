"""`air doctor`'s look at Slurm: the controller answers (sinfo), the nodes' states, and the
shared folder a cluster of more than this host needs."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from air_skills import settings
from air_skills.backends.slurm import commands
from air_skills.errors import AirError

NAME = "slurm"


def doctor_check(home: Path, default_backend: str | None) -> dict[str, str]:
    """One doctor check: ok when Slurm is not in use here, else what sinfo says."""
    if shutil.which("sinfo") is None:
        if default_backend == "slurm":
            return {
                "name": NAME,
                "status": "fail",
                "detail": "this home's default backend is slurm, but `sinfo` is not on PATH",
                "next": "run air from a Slurm login node, or set the default backend to local",
            }
        return {"name": NAME, "status": "ok", "detail": "not in use (no Slurm here)", "next": ""}
    try:
        nodes = commands.nodes()
    except AirError as exc:
        return {"name": NAME, "status": "fail", "detail": exc.message, "next": exc.hint}
    bad = [f"{n} ({s})" for n, s in nodes if s.rstrip("*~#") in ("down", "drained", "fail")]
    here = {socket.gethostname().split(".")[0], socket.gethostname()}
    others = sorted({n for n, _ in nodes} - here)
    shared = settings.get("AIR_SLURM_SHARED_DIR")
    detail = f"sinfo answers: {len(nodes)} node(s)" + (
        f"; not usable: {', '.join(bad)}" if bad else ""
    )
    if others and not shared:
        return {
            "name": NAME,
            "status": "warn",
            "detail": detail + f"; nodes other than this host ({', '.join(others[:5])}) cannot"
            " read the job folders: AIR_SLURM_SHARED_DIR is not set",
            "next": "set AIR_SLURM_SHARED_DIR to a folder every node mounts, and AIR_HOME under it",
        }
    if shared and not Path(shared).is_dir():
        return {
            "name": NAME,
            "status": "warn",
            "detail": detail + f"; AIR_SLURM_SHARED_DIR {shared} is not a folder here",
            "next": "mount the shared storage, or point AIR_SLURM_SHARED_DIR at it",
        }
    if shared and not str(home).startswith(str(shared).rstrip("/") + "/"):
        detail += (
            f"; AIR_HOME {home} is not under AIR_SLURM_SHARED_DIR {shared}: jobs are staged"
            " there and their output fetched back"
        )
    status = "warn" if bad else "ok"
    nxt = "see why with `sinfo -R`; `scontrol update nodename=N state=resume`" if bad else ""
    return {"name": NAME, "status": status, "detail": detail, "next": nxt}
