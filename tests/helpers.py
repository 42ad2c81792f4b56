"""Test helpers: polling with a deadline instead of sleeps, a free local port."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path


def wait_until(predicate: Callable[[], object], timeout_s: float = 30.0, every_s: float = 0.05):
    """Poll ``predicate`` until it returns something truthy; fail with a clear message."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s: {predicate}")
        time.sleep(every_s)


def free_port() -> int:
    """A localhost TCP port nothing listens on (closed again: a server may take it, or a
    client may find it down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# A job that runs until the test opens its gate: a blocker that holds its GPUs however slowly
# the launches after it go on a loaded machine (a fixed sleep ends before them at load 12).
# The gate is a file in the job's own folder, which the job sees even inside the sandbox.
GATED = (
    "import os, time\n"
    "gate = os.path.join(os.path.dirname(os.environ['AIR_CONFIG_FILE']), 'gate')\n"
    "deadline = time.monotonic() + 120\n"
    "while not os.path.exists(gate) and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
)


def open_gate(job_dir: Path) -> None:
    """Let a GATED job end."""
    (job_dir / "gate").write_text("")


def started_ahead(pid: int) -> bool:
    """Whether a sandboxed job's recorded process (its bwrap) is a sandbox made ahead by an
    idle supervisor (runtime/execution/sandbox_ahead.py), not one bwrap made at its start."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return b"sandbox_stub.py" in f.read()


def spares_ready(home: Path) -> bool:
    """Whether every idle supervisor of ``home`` holds a sandbox made ahead whose stub waits
    for a job (sandbox_ahead.READY_NAME, three processes below it: bwrap, bwrap's init)."""
    import sqlite3

    conn = sqlite3.connect(home / "air.db")
    try:
        idle = {row[0] for row in conn.execute("SELECT pid FROM idle_supervisors")}
    finally:
        conn.close()
    return bool(idle) and idle <= set(ready_spares(home).values())


def ready_spares(home: Path) -> dict[int, int]:
    """The waiting stubs of sandboxes made ahead for ``home``: stub pid -> its supervisor."""
    from air_skills.runtime.execution.sandbox_ahead import READY_NAME

    mark = f"\0{os.path.realpath(home)}\0".encode()
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or _read(f"/proc/{entry}/comm") != READY_NAME:
            continue
        bwrap = _parent(_parent(int(entry)))
        try:
            with open(f"/proc/{bwrap}/cmdline", "rb") as f:
                if mark not in f.read():
                    continue
        except OSError:
            continue
        out[int(entry)] = _parent(bwrap)
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0
