"""The job model: what a job asks for (JobSpec), where it stands (JobStatus, JobInfo).

Strict pydantic v2 models: unknown fields are refused, and every problem is reported at once.
``from air_skills.models import X`` reaches every name of the parts below.
"""

from __future__ import annotations

from air_skills.models.config_json import MAX_CONFIG_DEPTH, MAX_CONFIG_VALUES, json_problem
from air_skills.models.info import CodeInfo, GpuInfo, JobInfo, utc_from_ts
from air_skills.models.replies import LogChunk, Metrics, Page
from air_skills.models.spec import (
    CONTROL_CHARS,
    MAX_GPUS_PER_JOB,
    STORED,
    Backend,
    DataInput,
    FailureKind,
    JobSpec,
    Priority,
    refuse_nul,
    split_command,
)
from air_skills.status import JobStatus

__all__ = [
    "CONTROL_CHARS",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_VALUES",
    "MAX_GPUS_PER_JOB",
    "STORED",
    "Backend",
    "CodeInfo",
    "DataInput",
    "FailureKind",
    "GpuInfo",
    "JobInfo",
    "JobSpec",
    "JobStatus",
    "LogChunk",
    "Metrics",
    "Page",
    "Priority",
    "json_problem",
    "refuse_nul",
    "split_command",
    "utc_from_ts",
]
