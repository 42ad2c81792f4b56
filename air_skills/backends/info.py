"""A job's record as the public ``JobInfo`` (pydantic, so it lives above the runtime): the
JSON of backends/job_view.py, validated into the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from air_skills.backends.job_view import job_json
from air_skills.runtime.store.records import JobRecord

if TYPE_CHECKING:
    from air_skills.models import JobInfo


def row_to_info(row: JobRecord) -> JobInfo:
    """The job's record as callers see it: status, message (with any tracking note), times."""
    from air_skills.models import JobInfo  # pydantic: imported by the first caller that needs it

    return JobInfo.model_validate(job_json(row))
