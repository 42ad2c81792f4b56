"""Test helpers: polling with a deadline instead of sleeps, a free local port."""

from __future__ import annotations

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
