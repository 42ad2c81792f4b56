"""A job's record as the public ``JobInfo`` (pydantic, so it lives above the runtime)."""

from __future__ import annotations

import json

from air_skills.gpu.hardware import read_record
from air_skills.models import CodeInfo, JobInfo, utc_from_ts
from air_skills.runtime.execution.sandbox import describe
from air_skills.runtime.store.records import JobRecord
from air_skills.status import PRIORITY_RANK, JobStatus

_RANK_TO_NAME = {v: k for k, v in PRIORITY_RANK.items()}


def row_to_info(row: JobRecord) -> JobInfo:
    """The job's record as callers see it: status, message (with any tracking note), times."""
    return JobInfo(
        job_id=row.job_id,
        name=row.name,
        status=JobStatus(row.status),
        failure_kind=row.failure_kind,
        exit_code=row.exit_code,
        signal=row.signal,
        message=row.message
        + (f" ({row.tracking_note})" if row.tracking_note and not row.run_id else ""),
        gpus=row.gpu_list(),
        priority=_RANK_TO_NAME[row.priority],  # type: ignore[arg-type]
        attempts=row.attempts,
        created_at=utc_from_ts(row.created_at),  # type: ignore[arg-type]
        started_at=utc_from_ts(row.started_at),
        ended_at=utc_from_ts(row.ended_at),
        run_id=row.run_id,
        experiment_id=row.experiment_id,
        log_path=row.log_path,
        backend=row.backend,
        project=row.project,
        borrowing=bool(row.borrowing),
        data=_data_refs(row.spec),
        code=CodeInfo.model_validate_json(row.code) if row.code else None,
        **_image(row.spec),
        sandbox=describe(json.loads(row.spec)) if row.backend == "local" else None,
        hardware=read_record(row.log_path) if row.started_at else None,
        launched_by=row.launched_by,
    )


def _image(spec_json: str) -> dict[str, str | None]:
    """The container image the job runs in and its ID (both None for a job on the host)."""
    spec = json.loads(spec_json)
    return {"image": spec.get("image"), "image_digest": spec.get("image_digest")}


def _data_refs(spec_json: str) -> list[str]:
    """Compact ``name@digest12`` references to the job's data inputs."""
    data = json.loads(spec_json).get("data")
    return [f"{d.get('name')}@{(d.get('digest') or '?')[:12]}" for d in data or ()]
