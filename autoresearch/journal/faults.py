"""Fault injection for tests: the loop kills itself right after it journals a named event.

The one crash-point helper is the runtime's (``air_skills.runtime.process.faults``); journal events
are points like any launch step.
"""

from __future__ import annotations

from air_skills.runtime.process.faults import crash_point

__all__ = ["crash_point"]
