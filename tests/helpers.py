"""Test helpers: polling with a deadline instead of sleeps."""

from __future__ import annotations

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
