"""The study folder: its files, the lock that keeps one loop per study, and stop requests.

The folder is owner-only (0700) and the files that hold the study are 0600 from their first
byte: a study's ``env`` may carry API keys. Their values live in ``env.json`` only; the saved
study and the journal name the variables (``ENV_HIDDEN`` as each value), and a resume reads the
values back (``fill_env``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidSpec, InvalidState
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
ENV_FILE = "env.json"  # the values of the study's env (owner-only); elsewhere: names only
ENV_HIDDEN = "(value kept in the study folder's env.json)"


def private_dir(path: Path) -> Path:
    """The study folder, made owner-only (0700); one of ours made by an older version is
    tightened (another user's is left be: its files are then refused by the loop's checks)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``path`` owner-only (0600) from its first byte: a temp file, then a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def hide_env(study: dict[str, Any]) -> dict[str, Any]:
    """The study dict with each env value replaced by ``ENV_HIDDEN`` (the names stay)."""
    env = study.get("env")
    if not isinstance(env, dict) or not env:
        return study
    return {**study, "env": {name: ENV_HIDDEN for name in env}}


def hidden_copy(study: Any) -> Any:
    """The Study with its env values hidden: what study.yaml and .start.yaml hold."""
    return study.model_copy(update={"env": hide_env(study.to_dict()).get("env", {})})


def save_env(study_dir: Path, env: dict[str, str]) -> None:
    """Keep the values of the study's env in ``env.json`` (0600); hidden ones are not values."""
    known = read_env(study_dir)
    values = {k: known.get(k, v) if v == ENV_HIDDEN else v for k, v in env.items()}
    write_private(Path(study_dir) / ENV_FILE, json.dumps(values))


def read_env(study_dir: Path) -> dict[str, str]:
    """The values in the folder's ``env.json``; {} when there is none (or it is unreadable)."""
    values = _read_json(Path(study_dir) / ENV_FILE)
    if not isinstance(values, dict):
        return {}
    return {k: v for k, v in values.items() if isinstance(k, str) and isinstance(v, str)}


def fill_env(study: Any, study_dir: Path | None) -> Any:
    """The study with the hidden env values of a saved study read back from ``env.json``."""
    hidden = [k for k, v in study.env.items() if v == ENV_HIDDEN]
    if not hidden:
        return study
    known = read_env(study_dir) if study_dir is not None else {}
    lost = [k for k in hidden if k not in known]
    if lost:
        raise InvalidSpec(
            f"the values of env {', '.join(lost)} are not in {ENV_FILE} of study folder"
            f" {study_dir}: the saved study keeps their names only",
            hint="give the values again in the study file's env (or restore env.json)",
            study_dir=str(study_dir),
        )
    return study.model_copy(update={"env": {k: known.get(k, v) for k, v in study.env.items()}})


class ProcessLock:
    """An exclusive POSIX lock on ``folder/lock_name`` while this process runs, with a record
    of who holds it (``folder/info_name``: pid, start time, host; ``ended_at`` once released).
    The kernel drops the lock when the process dies, even by kill -9, so a stale lock never
    blocks a restart; and unlike flock it is not shared with forked children (job supervisors
    fork from the loop). Subclasses say what a refusal means (``refused``)."""

    lock_name = ""
    info_name = ""

    def __init__(self, folder: Path) -> None:
        self.dir = Path(folder)
        self._fd: int | None = None

    def refused(self, info: dict[str, Any]) -> AirError:
        raise NotImplementedError

    def _info(self) -> dict[str, Any] | None:
        info = _read_json(self.dir / self.info_name)
        return info if isinstance(info, dict) else None

    def __enter__(self) -> ProcessLock:
        private_dir(self.dir)
        fd = os.open(self.dir / self.lock_name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise self.refused(self._info() or {}) from None
        self._fd = fd
        info = {
            "pid": os.getpid(),
            "start": own_start(),  # pid + start time: a reused pid is never this process
            "host": socket.gethostname(),
            "started_at": time.time(),
        }
        write_private(self.dir / self.info_name, json.dumps(info))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is None:
            return
        info = self._info() or {}
        if info.get("pid") == os.getpid():  # its record says it ended
            with contextlib.suppress(OSError):
                ended = {**info, "ended_at": time.time()}
                write_private(self.dir / self.info_name, json.dumps(ended))
        fcntl.lockf(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


class LoopLock(ProcessLock):
    """One loop per study folder (``.loop.lock``, ``loop.json``)."""

    lock_name = LOCK_FILE
    info_name = LOOP_FILE

    def refused(self, info: dict[str, Any]) -> AirError:
        return InvalidState(
            f"a loop is already running study folder {self.dir}"
            + (f" (pid {info['pid']})" if info.get("pid") else ""),
            hint=f"watch it with `autoresearch status {self.dir}`; stop it with"
            f" `autoresearch stop {self.dir}` (MCP: stop_study)",
            study_dir=str(self.dir),
        )

    def __enter__(self) -> LoopLock:
        super().__enter__()
        _LOCKS_HELD[str(self.dir.resolve())] = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            _LOCKS_HELD.pop(str(self.dir.resolve()), None)
        super().__exit__(*exc)


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
