"""Fault injection for tests: a process kills itself (SIGKILL) at a named point.

Launch steps are named below; the autoresearch loop names its journal events.
"""

from __future__ import annotations

import os
import signal

from air_skills import settings


def crash_point(step: str) -> None:
    """Die as a kill -9 would, if ``AIR_TEST_CRASH_AT`` names ``step`` (tests set it; unset,
    this does nothing). Steps of a launch, in order: ``prepare:intent``, ``prepare:folder``,
    ``prepare:run-made`` (its id not yet noted), ``prepare:run``, ``launch:locked``,
    ``launch:placed`` (renamed, not committed), ``launch:committed``. A job's end:
    ``end:run-ended`` (its MLflow run ended, the results index not yet written by the
    supervisor; through the home's writer: the record is in, the writer wrote the index),
    ``end:recorded`` (through the home's writer: the record is in, the run's end queued and
    not yet waited for)."""
    if settings.get("AIR_TEST_CRASH_AT") == step:
        os.kill(os.getpid(), signal.SIGKILL)
