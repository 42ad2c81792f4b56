"""How runtime processes wake each other and wait without polling: pokes, pidfds, wakeups."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

# Sent to a supervisor to say "read the state now": its job's stop request (cancel, preempt),
# or, when it is idle, the job that a pass handed to it. Not SIGTERM: a poke that arrives
# late, for a job that has already ended, is harmless.
POKE_SIGNAL = signal.SIGUSR1

_wake_fd: int | None = None  # read end of the signal wakeup pipe (install_wakeup)


class SignalFlag:
    """A flag a signal handler sets: a plain attribute, never a lock. A handler that takes a
    lock (``threading.Event.set``) deadlocks when a second signal lands while the first
    handler holds it: two SIGCHLDs in a row (the job and its `setsid` child) hung a
    supervisor in its cancel."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def clear(self) -> None:
        self._set = False


def install_wakeup() -> None:
    """Signals wake ``wait_readable`` at once (their handlers only set flags)."""
    global _wake_fd
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _wake_fd = read_end


def wakeup_installed() -> bool:
    return _wake_fd is not None


def wait_readable(fds: list[int], timeout_s: float) -> None:
    """Until one of ``fds`` is readable, a signal arrives, or the timeout (wakeup installed)."""
    assert _wake_fd is not None
    ready, _, _ = select.select([*fds, _wake_fd], [], [], max(0.0, timeout_s))
    if _wake_fd in ready:
        try:
            while os.read(_wake_fd, 256):
                pass
        except BlockingIOError:
            pass


def pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for a child to exit, without reaping it; True if it has."""
    fd = pidfd(pid)
    if fd is None:
        time.sleep(timeout_s)
        return False
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


class StartedChild:
    """A command that the spawner started before this interpreter booted (still our child)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours after all: its exit status is lost
                self.returncode = 255
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.01)
        return rc
