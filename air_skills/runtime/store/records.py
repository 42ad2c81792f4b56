"""One job's row of the ``jobs`` table as a typed, frozen record (pydantic-free)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from air_skills.home import JOB_ID_RE


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as the store holds it: one field per ``jobs`` column, in the table's order, with
    the raw stored values (``spec``, ``gpus`` and ``code`` stay JSON text; see the accessors).
    """

    seq: int
    job_id: str
    name: str
    spec: str
    status: str
    failure_kind: str | None
    exit_code: int | None
    signal: str | None
    message: str
    gpus: str
    cpus: int | None
    priority: int
    preemptible: int
    gpus_requested: int
    attempts: int
    user_retries: int
    infra_retries: int
    created_at: float
    queued_at: float
    started_at: float | None
    ended_at: float | None
    run_id: str | None
    experiment_id: str | None
    log_path: str | None
    backend: str
    backend_ref: str | None
    project: str
    borrowing: int
    idempotency_key: str | None
    supervisor_pid: int | None
    supervisor_start: str | None
    job_pid: int | None
    job_start: str | None
    stop_request: str | None
    stop_reason: str | None
    tracking_note: str | None
    code: str | None
    job_class: str | None
    launched_by: str | None = None  # an identity's name (air mcp-token), or the local user
    run_key: str | None = None  # what runs, hashed (store/dedup.py): no experiment twice
    near_key: str | None = None  # the same without the config's numbers: near-duplicates
    results_at: float | None = None  # when the results index got its final rows (results_index.py)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> JobRecord:
        """The record of a row selected as ``SELECT {JOB_COLUMNS} FROM jobs`` (positional:
        an older home's migrated table may order its columns differently, so never ``*``)."""
        return cls(*row)

    def spec_dict(self) -> dict[str, Any]:
        """The job's spec as stored (the JobSpec's JSON data, ``env`` values blanked)."""
        spec: dict[str, Any] = json.loads(self.spec)
        return spec

    def gpu_list(self) -> list[int]:
        """The GPU indexes the job holds now (empty while QUEUED)."""
        gpus: list[int] = json.loads(self.gpus)
        return gpus


JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobRecord))
# The select list that ``JobRecord.from_row`` expects, in field order.
JOB_COLUMNS = ", ".join(JOB_FIELDS)


_JOB_ID = JOB_FIELDS.index("job_id")
_LOG_PATH = JOB_FIELDS.index("log_path")


def record_in_home(row: Sequence[Any], home: str | os.PathLike[str]) -> JobRecord:
    """The record of a row selected as ``SELECT {JOB_COLUMNS}``, its log always its own
    folder's output.log under ``home``: a path stored in the database (a restored or
    another home's one) is never read or written."""
    values = list(row)
    job_id = values[_JOB_ID]
    ok = isinstance(job_id, str) and JOB_ID_RE.match(job_id)
    values[_LOG_PATH] = os.path.join(home, "jobs", job_id, "output.log") if ok else None
    return JobRecord(*values)
