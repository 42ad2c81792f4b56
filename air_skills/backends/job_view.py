"""A job's record as the JSON of ``JobInfo``, pydantic-free: the one mapping from a record to
what callers see. ``row_to_info`` (backends/info.py) validates it into the model; `air ls
--json` and `air status --json` print it as it is (cli/fast), without importing pydantic."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from air_skills.gpu.hardware import read_record
from air_skills.runtime.code.job_outputs import outputs
from air_skills.runtime.execution.sandbox import describe
from air_skills.runtime.store.records import JobRecord
from air_skills.status import PRIORITY_RANK

_RANK_TO_NAME = {v: k for k, v in PRIORITY_RANK.items()}
# CodeInfo's fields and defaults, in its order (a test checks them against the model).
CODE_FIELDS: dict[str, Any] = {
    "digest": None,
    "commit": None,
    "branch": None,
    "dirty": False,
    "files": 0,
    "patched": False,
    "note": None,
}


def job_json(row: JobRecord) -> dict[str, Any]:
    """The job's record as callers see it (JobInfo's fields, in its order, JSON values)."""
    spec = json.loads(row.spec)
    code = json.loads(row.code) if row.code else None
    data = spec.get("data") or ()  # each as name@digest12
    return {
        "job_id": row.job_id,
        "name": row.name,
        "status": row.status,
        "failure_kind": row.failure_kind,
        "exit_code": row.exit_code,
        "signal": row.signal,
        "message": row.message
        + (f" ({row.tracking_note})" if row.tracking_note and not row.run_id else ""),
        "gpus": row.gpu_list(),
        "priority": _RANK_TO_NAME[row.priority],
        "attempts": row.attempts,
        "created_at": iso_utc(row.created_at),
        "started_at": iso_utc(row.started_at),
        "ended_at": iso_utc(row.ended_at),
        "run_id": row.run_id,
        "experiment_id": row.experiment_id,
        "log_path": row.log_path,
        "backend": row.backend,
        "project": row.project,
        "borrowing": bool(row.borrowing),
        "data": [f"{d.get('name')}@{(d.get('digest') or '?')[:12]}" for d in data],
        "code": {k: code.get(k, v) for k, v in CODE_FIELDS.items()} if code else None,
        "image": spec.get("image"),
        "image_digest": spec.get("image_digest"),
        "sandbox": describe(spec) if row.backend in ("local", "slurm") else None,
        "hardware": read_record(row.log_path) if row.started_at else None,
        "launched_by": row.launched_by,
        "outputs": _outputs(row),
    }


def _outputs(row: JobRecord) -> list[str]:
    """The job's output folders (runtime/code/job_outputs.py), once it has started here."""
    if row.backend != "local" or not row.started_at or not row.log_path:
        return []
    return outputs(Path(row.log_path).parent)


def iso_utc(ts: float | None) -> str | None:
    """A timestamp as pydantic writes a UTC datetime: ISO 8601, ``Z`` for +00:00."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")
