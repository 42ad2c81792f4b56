"""The Slurm nodes AIR excluded from a job's retries (after NODE_FAIL, BOOT_FAIL, a drained
node or NCCL's signatures): which node, for which job, why and since when, for `air gpus`."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

EVENT = "slurm-bad-node"  # message: "<node>: <what went wrong>"
LOOKBACK_S = 7 * 24 * 3600


def note(node: str, what: str) -> str:
    """The event's message for one excluded node."""
    return f"{node}: {what}"


def node_of(message: str) -> str:
    return message.split(": ", 1)[0]


def notes(store: Any, now: float | None = None) -> list[str]:
    """One line per excluded node of the last week, newest last."""
    since = (now if now is not None else time.time()) - LOOKBACK_S
    lines = []
    for e in store.events_since(EVENT, since):
        node, _, what = str(e["message"]).partition(": ")
        when = datetime.fromtimestamp(float(e["ts"]), UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines.append(
            f"Slurm node {node} excluded from job {e['job_id']}'s retries since {when}:"
            f" {what or 'an infra failure'}"
        )
    return lines
