"""The job model: what a job asks for (JobSpec), where it stands (JobStatus, JobInfo).

Strict pydantic v2 models: unknown fields are refused, and every problem is reported at once.
``from air_skills.models import X`` reaches every name of the parts below, imported when first
asked for: a pydantic-free part (spec_view.py, config_json.py) is imported without pydantic,
so that `air launch` from a shell can check a plain spec without it (cli/fast/launch.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_PARTS = {
    "MAX_CONFIG_DEPTH": "config_json",
    "MAX_CONFIG_VALUES": "config_json",
    "json_problem": "config_json",
    "CodeInfo": "info",
    "GpuInfo": "info",
    "JobInfo": "info",
    "utc_from_ts": "info",
    "LogChunk": "replies",
    "Metrics": "replies",
    "Page": "replies",
    "CONTROL_CHARS": "spec_view",
    "MAX_GPUS_PER_JOB": "spec_view",
    "STORED": "spec",
    "Backend": "spec",
    "DataInput": "spec",
    "FailureKind": "spec",
    "JobSpec": "spec",
    "Priority": "spec",
    "refuse_nul": "spec",
    "split_command": "spec",
}

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

if TYPE_CHECKING:
    from air_skills.models.config_json import MAX_CONFIG_DEPTH, MAX_CONFIG_VALUES, json_problem
    from air_skills.models.info import CodeInfo, GpuInfo, JobInfo, utc_from_ts
    from air_skills.models.replies import LogChunk, Metrics, Page
    from air_skills.models.spec import (
        STORED,
        Backend,
        DataInput,
        FailureKind,
        JobSpec,
        Priority,
        refuse_nul,
        split_command,
    )
    from air_skills.models.spec_view import CONTROL_CHARS, MAX_GPUS_PER_JOB
    from air_skills.status import JobStatus


def __getattr__(name: str) -> Any:
    if name == "JobStatus":
        from air_skills.status import JobStatus

        return JobStatus
    part = _PARTS.get(name)
    if part is None:
        raise AttributeError(f"module 'air_skills.models' has no attribute {name!r}")
    return getattr(import_module(f"air_skills.models.{part}"), name)
