"""Steering requests handed to a running study's loop (issue 39.9), as ``stop_study`` hands it a
stop: one small file each in ``<study>/steer/``, taken (and removed) by the loop, which journals
each as a ``steer`` event; and who started the study (``started_by``), the identity that may
steer it besides the owner."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

STEER_DIR = "steer"
STARTED_BY = "started_by"  # the identity that started the study through air-mcp, if any


def request_steer(study_dir: Path, request: dict[str, Any]) -> None:
    """Leave ``request`` for the study's loop (whole, or not at all)."""
    folder = Path(study_dir) / STEER_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(3).hex()}.json"
    tmp = folder / (name + ".tmp")
    tmp.write_text(json.dumps(request))
    tmp.replace(folder / name)


def take_steer_requests(study_dir: Path) -> list[dict[str, Any]]:
    """The requests left since the last take, oldest first; each is removed as it is read (a
    file that is not a JSON object is dropped)."""
    folder = Path(study_dir) / STEER_DIR
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = None
        with contextlib.suppress(OSError):
            path.unlink()
        if isinstance(data, dict):
            out.append(data)
    return out


def record_starter(study_dir: Path, identity: str | None) -> None:
    """Note who started the study (an air-mcp identity); nothing for the local user."""
    if identity:
        (Path(study_dir) / STARTED_BY).write_text(identity)


def starter(study_dir: Path) -> str | None:
    try:
        return (Path(study_dir) / STARTED_BY).read_text().strip() or None
    except OSError:
        return None
