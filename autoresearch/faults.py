"""Fault injection for tests: kill the loop with SIGKILL right after it journals a named event."""

from __future__ import annotations

import os
import signal

from air_skills import settings


def crash_point(event: str) -> None:
    """Die as a kill -9 would, if ``AIR_TEST_CRASH_AT`` names ``event`` (tests set it; unset,
    this does nothing). Called after the event's line is on disk, before anything acts on it."""
    if settings.get("AIR_TEST_CRASH_AT") == event:
        os.kill(os.getpid(), signal.SIGKILL)
