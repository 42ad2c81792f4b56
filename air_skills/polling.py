"""One back-off for every wait that polls: growing sleeps, capped, never past a deadline."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator


def backoff(
    first_s: float = 0.02,
    factor: float = 1.5,
    cap_s: float = 0.5,
    timeout_s: float | None = None,
    jitter: bool = False,
) -> Iterator[float]:
    """Sleep between polls: yields the time waited so far, until ``timeout_s`` has passed.

    Use as ``for _ in backoff(timeout_s=5): if ready(): break``. Each sleep grows by
    ``factor`` up to ``cap_s`` and is cut short at the deadline; ``jitter`` spreads sleeps of
    processes that contend for one lock. The first poll comes before any sleep. With no
    ``timeout_s`` it never ends by itself.
    """
    start = time.monotonic()
    deadline = None if timeout_s is None else start + timeout_s
    delay = first_s
    while True:
        yield time.monotonic() - start
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        sleep = delay * (0.5 + random.random()) if jitter else delay
        if deadline is not None:
            sleep = min(sleep, deadline - now)
        time.sleep(max(0.0, sleep))
        delay = min(delay * factor, cap_s)
