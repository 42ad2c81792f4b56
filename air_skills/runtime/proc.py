"""Process identity on Linux: a pid plus its start time, so a reused pid is never mistaken."""

from __future__ import annotations

import os
import signal


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":  # a zombie has exited
        return None
    return fields[19].decode()


def alive(pid: int | None, start: str | None) -> bool:
    if not pid:
        return False
    now = start_time(pid)
    return now is not None and (start is None or now == start)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


_own_start: str | None = None


def own_start() -> str:
    """This process's start time (see start_time), read once."""
    global _own_start
    if _own_start is None:
        _own_start = start_time(os.getpid()) or ""
    return _own_start
