"""A job's disk cap (issue 37.10): the blocks its folder holds, polled on the supervisor's tick.

The cap is the spec's ``disk_gb``, else ``AIR_JOB_DISK_GB`` of its launch (none: no cap). What
counts is what the disk gave the folder, checkpoints, outputs, logs and its relayed MLflow store
included: allocated blocks (``st_blocks * 512``), so a sparse file counts what it holds, not its
length; a file linked twice counts once. The folder is the job's ground: it is walked by
descriptor (``O_DIRECTORY | O_NOFOLLOW``, each entry ``lstat``-ed relative to its folder), never
through a link. A job past its cap is stopped and FAILED, never retried (it would write as much
again), its message naming the cap. Its private ``/tmp`` has a size of its own (sandbox/mounts.py).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from air_skills import settings

GB = 1e9
# The walk costs a stat per file: it runs at most every MIN_INTERVAL_S, and never more often
# than SPAN times its own last duration (a folder of a million files is not walked each second).
MIN_INTERVAL_S = 1.0
SPAN = 20.0


def folder_bytes(jdir: Path) -> int:
    """The bytes the disk allocated to ``jdir`` and everything under it (no link followed)."""
    seen: set[tuple[int, int]] = set()
    try:
        fd = os.open(jdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        return _walk(fd, seen)
    finally:
        os.close(fd)


def _walk(fd: int, seen: set[tuple[int, int]]) -> int:
    info = os.fstat(fd)
    total = info.st_blocks * 512
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return total
    for entry in entries:
        try:
            st = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
        except OSError:  # gone meanwhile
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue
        seen.add(key)
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(
                    entry.name,
                    os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                    dir_fd=fd,
                )
            except OSError:  # replaced by a link or removed since: not followed
                total += st.st_blocks * 512
                continue
            try:
                total += _walk(sub, seen)
            finally:
                os.close(sub)
        else:
            total += st.st_blocks * 512
    return total


def cap_gb(spec: dict[str, Any], launched: dict[str, str] | None) -> float | None:
    """The job's cap in GB: its spec's ``disk_gb``, else its launch's AIR_JOB_DISK_GB."""
    value = spec.get("disk_gb")
    if value:
        return float(value)
    return settings.get("AIR_JOB_DISK_GB", launched if launched is not None else os.environ)


@dataclass
class DiskWatch:
    jdir: Path
    cap_gb: float
    next_at: float = 0.0
    used: int = 0

    def tick(self, now: float) -> str | None:
        """Past the cap: what to say of it; else None (the folder is walked when due)."""
        if now < self.next_at:
            return None
        began = time.monotonic()
        self.used = folder_bytes(self.jdir)
        took = time.monotonic() - began
        self.next_at = now + max(MIN_INTERVAL_S, SPAN * took)
        if self.used <= self.cap_gb * GB:
            return None
        return (
            f"disk: wrote past its cap of {_gb(self.cap_gb)} GB ({self.used / GB:.3g} GB"
            " allocated in its folder, checkpoints included)"
        )


def _gb(value: float) -> str:
    return f"{value:g}"


def watch(jdir: Path, spec: dict[str, Any], launched: dict[str, str] | None) -> DiskWatch | None:
    """The job's disk watch (None: no cap)."""
    cap = cap_gb(spec, launched)
    return DiskWatch(jdir, cap) if cap else None


def outcome(what: str, row: Any, spec: dict[str, Any]) -> Any:
    """FAILED (the job's own doing, never retried: it would write as much again)."""
    from air_skills.runtime.results.outcomes import AttemptEnd, classify

    out = classify(AttemptEnd(row.job_id, signal="SIGTERM", max_retries=0))
    cap = spec.get("disk_gb")
    raise_it = "raise disk_gb" if cap else "give the job disk_gb (AIR_JOB_DISK_GB is the default)"
    return replace(
        out,
        message=f"FAILED: {what}; the job was stopped. Next: keep fewer or smaller checkpoints"
        f" and outputs in its folder, or {raise_it}, then relaunch",
    )
