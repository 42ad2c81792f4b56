"""Steering a running study (issue 39.9): the ``steer`` journal event folded into the study's
state. One event per request, written by the loop that takes it (or, with no loop running, by
``api.steer_study`` itself), so it is in the journal, shown by get_study and the report, and
survives a resume: a note the proposer reads from its next call, configs or patches queued to
run next (Optuna's ``enqueue_trial``), a budget raised or lowered, a parameter pinned.
Stdlib only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STEER = "steer"
ACTIONS = ("note", "enqueue", "budget", "pin")
BUDGET_KEYS = ("trials", "wall_time_min", "gpu_hours", "llm_usd", "concurrency")


@dataclass
class Steering:
    """What steering has asked so far, replayed from the journal."""

    notes: list[str] = field(default_factory=list)
    queue: list[dict[str, Any]] = field(default_factory=list)  # {id, diff, patch, parent, note}
    budget: dict[str, Any] = field(default_factory=dict)  # budget key -> its new limit
    pins: dict[str, Any] = field(default_factory=dict)  # parameter -> its pinned value
    log: list[dict[str, Any]] = field(default_factory=list)  # each request, as journaled

    def apply(self, ev: dict[str, Any]) -> None:
        """Fold one ``steer`` event in."""
        entry = {k: v for k, v in ev.items() if k not in ("event",)}
        self.log.append(entry)
        if ev.get("note"):
            self.notes.append(str(ev["note"]))
        for n, item in enumerate(ev.get("enqueue") or []):
            if isinstance(item, dict):
                self.queue.append({**item, "id": f"{ev.get('ts', 0)}:{n}"})
        for key, value in (ev.get("budget") or {}).items():
            if key in BUDGET_KEYS:
                self.budget[key] = value
        for key, value in (ev.get("pin") or {}).items():
            if value is None:
                self.pins.pop(key, None)  # null unpins
            else:
                self.pins[key] = value

    def taken(self, steer_id: str | None) -> None:
        """A queued item became a trial (its proposal carries ``steer_id``)."""
        if steer_id:
            self.queue = [q for q in self.queue if q.get("id") != steer_id]

    def line(self, entry: dict[str, Any]) -> str:
        """One steering request in words (get_study, the report, the page)."""
        parts = []
        if entry.get("note"):
            parts.append(f"note: {str(entry['note'])[:200]}")
        if entry.get("enqueue"):
            parts.append(f"queued {len(entry['enqueue'])} trial(s) to run next")
        if entry.get("budget"):
            parts.append("budget " + ", ".join(f"{k}={v}" for k, v in entry["budget"].items()))
        if entry.get("pin"):
            parts.append("pinned " + ", ".join(f"{k}={v}" for k, v in entry["pin"].items()))
        by = entry.get("by") or "the owner"
        return f"steered by {by}: " + "; ".join(parts)
