"""Inside a job: declare a long quiet stretch (a checkpoint save, an evaluation, a download).

Stdlib only and imports nothing else of the package, so a training script pays no toolkit
import cost::

    from air_skills.job import phase

    with phase("checkpoint", expect_min=3):
        torch.save(state, path)

While the phase is open, the supervisor's stall clock allows it ``expect_min`` minutes of
silence instead of the job's ``stall_timeout_min``. The phase is a small JSON file in the job's
folder (``phases/<RANK>.json``; beside the checkpoints when the folder is not writable),
removed when the block ends. Outside an AIR job (no AIR_CHECKPOINT_DIR) it does nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = "phases"  # under the job's folder
FALLBACK = ".air-phases"  # under AIR_CHECKPOINT_DIR, where the job's folder is read-only


def _folders() -> list[str]:
    """Where a phase file may go, first choice first (empty outside an AIR job): the job's
    folder is the one that holds AIR_CHECKPOINT_DIR (read directly: a job pays for no
    settings import; tests/air_skills/interface/test_settings.py lists this module)."""
    ckpt = os.environ.get("AIR_CHECKPOINT_DIR")
    if not ckpt:
        return []
    return [
        os.path.join(os.path.dirname(os.path.abspath(ckpt)), PHASES),
        os.path.join(ckpt, FALLBACK),
    ]


def _write(name: str, expect_min: float) -> str | None:
    """Write this rank's phase file; its path, or None when no folder would take it."""
    rank = os.environ.get("RANK", "0")
    record = {"name": name, "expect_min": expect_min, "started": time.time(), "pid": os.getpid()}
    data = json.dumps(record).encode()
    for folder in _folders():
        path = os.path.join(folder, f"{rank}.json")
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            return path
        except OSError:
            continue
    return None


@contextmanager
def phase(name: str, expect_min: float) -> Iterator[None]:
    """A stretch of up to ``expect_min`` minutes in which the job may print and log nothing."""
    if not isinstance(expect_min, int | float) or isinstance(expect_min, bool) or expect_min <= 0:
        raise ValueError(f"phase {name!r}: expect_min must be a number of minutes > 0")
    path = _write(str(name)[:200], float(expect_min))
    try:
        yield
    finally:
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass
