"""AIR Skills: launch, watch and cancel ML jobs on GPUs; one Client API for CLI, MCP and loops.

Names are imported lazily, so that small processes (the job supervisor) stay fast to start.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Client": "air_skills.client",
    "JobSpec": "air_skills.models",
    "JobInfo": "air_skills.models",
    "JobStatus": "air_skills.status",
    "GpuInfo": "air_skills.models",
    "LogChunk": "air_skills.models",
    "Metrics": "air_skills.models",
    "Page": "air_skills.models",
    "AirError": "air_skills.errors",
}

__all__ = [
    "AirError",
    "Client",
    "GpuInfo",
    "JobInfo",
    "JobSpec",
    "JobStatus",
    "LogChunk",
    "Metrics",
    "Page",
    "__version__",
]

if TYPE_CHECKING:
    from air_skills.client import Client
    from air_skills.errors import AirError
    from air_skills.models import GpuInfo, JobInfo, JobSpec, LogChunk, Metrics, Page
    from air_skills.status import JobStatus


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'air_skills' has no attribute {name!r}")
    return getattr(import_module(module), name)
