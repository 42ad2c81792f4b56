"""Test helpers: polling with a deadline instead of sleeps, a free local port."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


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
