"""The metric steps a relayed job has logged to its own store, read where it writes them.

A sandboxed (or image) job logs to an MLflow file store in its own folder and its supervisor
relays each line to the shared store (runtime/execution/metric_relay.py). The stall watch reads
the steps here, not after the relay: a relay still waiting for MLflow's import (seconds on a
loaded machine) must not make a job that logs a new step every second look stalled.
A metric file holds ``timestamp value step`` lines; only a file that grew is read, and only its
last line. Nothing is followed out of the job's folder and nothing but a regular file is read
(a FIFO the job made never blocks the supervisor).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from air_skills.runtime.execution.metric_relay import RELAY_DIR

_TAIL = 256  # bytes: more than one metric line


class OwnSteps:
    """The latest step of each metric in a job's own store, read as the files grow."""

    def __init__(self, jdir: Path, run_id: str) -> None:
        self.root = jdir / RELAY_DIR
        self.run_id = run_id
        self._folder: Path | None = None
        self._sizes: dict[str, int] = {}

    def steps(self) -> dict[str, int]:
        """Metric key -> its last logged step, for the files that grew since the last call."""
        folder = self._metrics_folder()
        if folder is None:
            return {}
        out: dict[str, int] = {}
        for dirpath, _dirs, names in os.walk(folder, followlinks=False):
            for name in names:
                path = os.path.join(dirpath, name)
                key = os.path.relpath(path, folder)
                step = self._last_step(path, key)
                if step is not None:
                    out[key] = step
        return out

    def _metrics_folder(self) -> Path | None:
        if self._folder is None:
            try:
                for exp in os.scandir(self.root):
                    candidate = Path(exp.path) / self.run_id / "metrics"
                    if not exp.is_symlink() and candidate.is_dir() and not candidate.is_symlink():
                        self._folder = candidate
                        break
            except OSError:
                return None
        return self._folder

    def _last_step(self, path: str, key: str) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size == self._sizes.get(key):
                return None
            self._sizes[key] = info.st_size
            os.lseek(fd, max(0, info.st_size - _TAIL), os.SEEK_SET)
            lines = os.read(fd, _TAIL).splitlines()
        finally:
            os.close(fd)
        try:
            return int(lines[-1].split()[2])
        except (IndexError, ValueError):
            return None
