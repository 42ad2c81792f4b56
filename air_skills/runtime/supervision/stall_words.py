"""The words of a stall: the dataclass the watch finds, and how job messages say it.

Read by the client, the report, the loop and air-mcp, which need the words, not the watch
(stall.py: the supervisor's tick and what it decides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MARK = "reason: stalled"  # in the message of every job the watch stopped


def minutes(seconds: float) -> str:
    m = seconds / 60
    return f"{m:.2g}" if m < 10 else f"{m:.0f}"


@dataclass(frozen=True)
class Stall:
    """A stalled attempt: how long it was quiet, its budget, and what its processes did."""

    silent_s: float
    budget_s: float
    summary: str  # one line: where each rank (or process) was
    infra: bool  # some rank waits in a collective or rendezvous
    stacks_path: str | None
    phase: str | None = None

    def what(self) -> str:
        """``stalled 31 min: rank 1 in all_reduce (...); rank 0 in train.py:88 step()``"""
        where = f" in phase {self.phase!r}" if self.phase else ""
        return f"stalled {minutes(self.silent_s)} min{where}: {self.summary}"


def notify_message(stall: Stall) -> str:
    """A running job's message once it stalled under ``on_stall: notify``."""
    where = f"; stacks: {stall.stacks_path}" if stall.stacks_path else ""
    return f"RUNNING: {stall.what()} ({MARK}; on_stall: notify, still running{where})"


def stalls_since(store: Any, job_ids: list[str], since: float) -> dict[str, str]:
    """The jobs of ``job_ids`` that stalled after ``since`` (epoch s): id -> what was seen
    (a ``stalled`` event under notify; else the event of the outcome, written with it)."""
    marks = ",".join("?" * len(job_ids))
    rows = store.read(
        "SELECT job_id, message FROM events WHERE ts > ?"
        f" AND job_id IN ({marks}) AND (kind = 'stalled' OR instr(message, ?) > 0)"
        " ORDER BY id",
        (since, *job_ids, MARK),
    )
    return {r["job_id"]: r["message"] for r in rows}


# Where the "stalled N min: ..." part of a message ends (see outcome, notify_message, say_stalled).
_WHAT_ENDS = (f" ({MARK}", " (a rank waits", " (on_stall: retry", f"; {MARK})")


def note(message: str, limit: int = 80) -> str | None:
    """``stalled 31 min: rank 1 in all_reduce (dist.py:123); ...`` from a job's message, cut
    to ``limit`` characters; None when the message says no stall."""
    if MARK not in message or (start := message.find("stalled ")) < 0:
        return None
    text = message[start:]
    ends = [i for i in (text.find(e) for e in _WHAT_ENDS) if i > 0]
    text = text[: min(ends)] if ends else text
    return text if len(text) <= limit else text[: limit - 3] + "..."


def say_stalled(message: str, what: str | None) -> str:
    """A job's message, told that it stalled (once: a message that says so is kept)."""
    if not what or "stalled" in message:
        return message
    return f"{message} (it {what}; {MARK})"
