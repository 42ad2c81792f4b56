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

from air_skills.job_folder import open_at
from air_skills.runtime.execution.metric_relay import RELAY_DIR

_TAIL = 256  # bytes: more than one metric line


class OwnSteps:
    """The latest step of each metric in a job's own store, read as the files grow."""

    def __init__(self, jdir: Path, run_id: str) -> None:
        self.jdir = jdir
        self.run_id = run_id
        self._parts: tuple[str, ...] | None = None  # mlruns/<experiment>/<run>/metrics
        self._sizes: dict[str, int] = {}

    def steps(self) -> dict[str, int]:
        """Metric key -> its last logged step, for the files that grew since the last call.
        Every folder and file is reached by descriptor from the job's folder, none through a
        link (air_skills/job_folder.py): the job may have swapped any of them for one."""
        parts = self._metrics_parts()
        if parts is None:
            return {}
        try:
            folder = open_at(self.jdir, *parts)
        except (OSError, ValueError):
            return {}
        out: dict[str, int] = {}
        with folder:
            for key, dir_fd, name, st in folder.walk_files():
                if st.st_size == self._sizes.get(key):
                    continue
                step = self._last_step(dir_fd, name, key)
                if step is not None:
                    out[key] = step
        return out

    def _metrics_parts(self) -> tuple[str, ...] | None:
        if self._parts is None:
            try:
                with open_at(self.jdir, RELAY_DIR) as root:
                    for exp in sorted(root.names()):
                        if root.is_dir(exp):
                            with root.sub(exp) as e:
                                if e.is_dir(self.run_id):
                                    with e.sub(self.run_id) as r:
                                        if r.is_dir("metrics"):
                                            self._parts = (RELAY_DIR, exp, self.run_id, "metrics")
                                            break
            except (OSError, ValueError):
                return None
        return self._parts

    def _last_step(self, dir_fd: int, name: str, key: str) -> int | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size == self._sizes.get(key):
                return None
            self._sizes[key] = info.st_size
            lines = os.pread(fd, _TAIL, max(0, info.st_size - _TAIL)).splitlines()
        finally:
            os.close(fd)
        try:
            return int(lines[-1].split()[2])
        except (IndexError, ValueError):
            return None
