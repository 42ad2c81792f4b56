"""The study folder: its files, the lock that keeps one loop per study, and stop requests."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidState
from air_skills.runtime.process.proc import alive, own_start
from autoresearch.spec.safe_read import read_regular

STUDY_FILE = "study.yaml"
LOCK_FILE = ".loop.lock"
LOOP_FILE = "loop.json"
STOP_FILE = "stop.json"
LOOP_LOG = "loop.log"
REPORT_FILE = "report.md"
_LOCKS_HELD: dict[str, bool] = {}  # study folders whose lock this process holds
PLOT_FILE = "objective.png"


class LoopLock:
    """An exclusive POSIX lock on the study folder, held while a loop runs. The kernel drops it
    when the process dies, even by kill -9, so a stale lock cannot block a resume; and unlike
    flock it is not shared with forked children (job supervisors fork from the loop)."""

    def __init__(self, study_dir: Path) -> None:
        self.dir = Path(study_dir)
        self._fd: int | None = None

    def __enter__(self) -> LoopLock:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            info = read_loop_info(self.dir) or {}
            raise InvalidState(
                f"a loop is already running study folder {self.dir}"
                + (f" (pid {info['pid']})" if info.get("pid") else ""),
                hint=f"watch it with `autoresearch status {self.dir}`; stop it with"
                f" `autoresearch stop {self.dir}` (MCP: stop_study)",
                study_dir=str(self.dir),
            ) from None
        self._fd = fd
        _LOCKS_HELD[str(self.dir.resolve())] = True
        info = {
            "pid": os.getpid(),
            "start": own_start(),  # pid + start time: a reused pid is never this loop
            "host": socket.gethostname(),
            "started_at": time.time(),
        }
        (self.dir / LOOP_FILE).write_text(json.dumps(info))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            info = read_loop_info(self.dir) or {}
            if info.get("pid") == os.getpid():  # this loop's record says it ended
                with contextlib.suppress(OSError):
                    (self.dir / LOOP_FILE).write_text(json.dumps({**info, "ended_at": time.time()}))
            _LOCKS_HELD.pop(str(self.dir.resolve()), None)
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_json(path: Path) -> Any:
    """A small JSON file's value, or None; a FIFO or a device in its place is not waited on."""
    try:
        return json.loads(read_regular(path, "file", max_bytes=64_000))
    except (AirError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def read_loop_info(study_dir: Path) -> dict[str, Any] | None:
    info = _read_json(Path(study_dir) / LOOP_FILE)
    return info if isinstance(info, dict) else None


def loop_alive(study_dir: Path) -> dict[str, Any] | None:
    """The running loop's info (pid, host, started_at), or None when no loop holds the study.

    The lock says so; and where the lock is free but loop.json names a live process (same pid
    and start time, this host) that has not ended its loop, that loop runs all the same: a
    POSIX lock is dropped when its process closes any fd of the file, which a snapshot of a
    study folder inside the code tree once did (issue 24: "interrupted" while it ran)."""
    path = Path(study_dir) / LOCK_FILE
    if not path.exists():
        return None
    info = read_loop_info(study_dir)
    here = bool(info) and info.get("host") == socket.gethostname()  # type: ignore[union-attr]
    if info and here and info.get("pid") == os.getpid():
        # This process may hold the lock: closing any fd of the file would drop it (POSIX).
        return info if _LOCKS_HELD.get(str(Path(study_dir).resolve())) else None
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return info or {"pid": None}
        fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    if info and here and not info.get("ended_at") and info.get("start"):
        if alive(info.get("pid"), str(info["start"])):
            return info
    return None


def request_stop(study_dir: Path, cancel_running: bool, reason: str) -> None:
    data = {"cancel_running": cancel_running, "reason": reason, "ts": time.time()}
    tmp = Path(study_dir) / (STOP_FILE + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(Path(study_dir) / STOP_FILE)


def take_stop_request(study_dir: Path) -> dict[str, Any] | None:
    path = Path(study_dir) / STOP_FILE
    if not path.exists():
        return None
    data = _read_json(path)
    with contextlib.suppress(OSError):
        path.unlink()  # a bad request is dropped too: it would be read again on every poll
    return data if isinstance(data, dict) else None
