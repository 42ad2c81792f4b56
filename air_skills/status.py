"""Job states and priorities: plain enums, importable without pydantic (the supervisor is lean)."""

from __future__ import annotations

import enum

PRIORITY_RANK: dict[str, int] = {"low": 0, "normal": 1, "high": 2}


class JobStatus(str, enum.Enum):
    """Where a job stands. Terminal states never change again."""

    QUEUED = "QUEUED"  #: waiting for GPUs (or requeued after a preemption or an infra failure)
    RUNNING = "RUNNING"  #: its supervisor has started (or is starting) the command
    SUCCEEDED = "SUCCEEDED"  #: the command exited 0
    FAILED = "FAILED"  #: the command failed (user) or the machine did (infra), retries spent
    CANCELLED = "CANCELLED"  #: cancelled by a user, an agent or the autoresearch loop
    TIMED_OUT = "TIMED_OUT"  #: ran past timeout_min and was stopped

    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    def __str__(self) -> str:
        return self.value


TERMINAL_STATUSES = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT}
)
