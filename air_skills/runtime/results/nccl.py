"""NCCL and collective-communication failures: the one signature table, read from a job's log.

A job whose log shows one of these lines failed in the fabric between its ranks (a dead peer,
a wedged link, a watchdog timeout), not in its own code: outcomes.py makes it an infra failure
with reason ``nccl``, retried after a deep preflight of its GPUs. Used by the supervisor
(runtime/execution/gang.py) and by the Ray reconciler.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REASON = "nccl"
# Written into the requeue message (outcomes.py), so the next attempt knows to check first.
MARK = f"reason: {REASON}"

# (pattern, what it means). Matched per line, case-sensitively: these are NCCL's and torch's
# own spellings, and a user's log line that merely mentions "nccl" must not count.
SIGNATURES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), meaning)
    for pattern, meaning in (
        (r"\bNCCL error\b", "NCCL reported an error"),
        (r"\bncclSystemError\b", "NCCL system error (socket, memory or driver call failed)"),
        (r"\bncclInternalError\b", "NCCL internal error"),
        (r"\bncclRemoteError\b", "a remote rank failed (NCCL remote error)"),
        (r"\bncclUnhandledCudaError\b", "a CUDA call inside NCCL failed"),
        (
            r"Watchdog caught collective operation timeout",
            "a collective timed out (NCCL watchdog)",
        ),
        (r"NCCL communicator was aborted", "the NCCL communicator was aborted"),
        (r"\bProcessGroupNCCL\b.*\b(?:timeout|Timeout|timed out)\b", "a collective timed out"),
        (r"\bNCCL WARN\b.*\b(?:Connection|connection)\b", "an NCCL connection failed"),
    )
)


def signature(lines: Iterable[str]) -> tuple[str, str] | None:
    """The last line matching a signature and what it means, or None if none does."""
    found: tuple[str, str] | None = None
    for line in lines:
        for pattern, meaning in SIGNATURES:
            if pattern.search(line):
                found = (line.strip()[:300], meaning)
                break
    return found


def describe(line: str, meaning: str) -> str:
    """The infra failure's ``what`` for a signature line."""
    return f"{meaning}: {line!r}"


def retry_after_nccl(events: Iterable[Any]) -> bool:
    """Whether the job's last requeue was for an NCCL failure (its GPUs are checked first)."""
    last = None
    for event in events:
        if str(event["kind"]).startswith("requeued-"):
            last = event
    return last is not None and last["kind"] == "requeued-infra" and MARK in last["message"]
