"""What a job wrote where the user looks: its checkpoint folder, and folders it made in its code
view (``./checkpoints``, ``./runs`` of TensorBoard, ...), named in `air status`, get_job and a
study's summary; code GC (code_gc.py) never removes a view that holds what the job wrote.

Stdlib only. A view is the job's to write: every path is looked at with lstat (a link the job
put there is never followed) and only named, never read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from air_skills.home import read_job_json

# The folders training scripts write by habit, relative to where they run: named when present.
HABITS = ("checkpoints", "checkpoint", "ckpt", "runs", "outputs", "output", "lightning_logs",
          "wandb", "logs", "models", "saved_models", "results")  # fmt: skip


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def outputs(jdir: Path) -> list[str]:
    """The job's output folders: AIR_CHECKPOINT_DIR (kept across retries), then the habitual
    folders in its code view's working folder (a snapshot job only: a live job writes into the
    user's own tree)."""
    found = [os.fspath(jdir / "checkpoints")] if _is_dir(os.fspath(jdir / "checkpoints")) else []
    try:
        record = read_job_json(jdir / "code.json")
        view = Path(record["view"])
        cwd = view / record["cwd"] if record.get("cwd") else view
    except (OSError, ValueError, KeyError, TypeError):
        return found
    return found + [os.fspath(cwd / n) for n in HABITS if _is_dir(os.fspath(cwd / n))]


def wrote_into_view(view: Path, snapshot_files: Iterable[str]) -> bool:
    """Whether the view holds a file its snapshot did not (a checkpoint, a TensorBoard run):
    walked without following links."""
    known = set(snapshot_files)
    top = os.fspath(view)
    for folder, dirs, files in os.walk(top, followlinks=False):
        rel = os.path.relpath(folder, top)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = name if rel == "." else f"{rel}/{name}"
            if path not in known and not path.endswith(".pyc"):
                return True
    return False
