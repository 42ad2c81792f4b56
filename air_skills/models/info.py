"""What is read back about a job: where it stands (JobInfo), its code (CodeInfo), the GPUs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from air_skills.models.spec import Backend, FailureKind, Priority
from air_skills.status import JobStatus


class CodeInfo(BaseModel):
    """Which code a job runs: its snapshot's digest and where that came from."""

    model_config = ConfigDict(extra="forbid")

    digest: str
    commit: str | None = None
    branch: str | None = None
    dirty: bool = False
    files: int = 0
    patched: bool = False
    note: str | None = None


class JobInfo(BaseModel):
    """Where a job stands: the JSON shape of `air status --json` and MCP `get_job`."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    name: str
    status: JobStatus
    failure_kind: FailureKind | None = None
    exit_code: int | None = None
    signal: str | None = None
    message: str = ""
    gpus: list[int] = Field(default_factory=list)
    priority: Priority = "normal"
    attempts: int = 0
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    run_id: str | None = None
    experiment_id: str | None = None
    log_path: str | None = None
    backend: Backend = "local"
    project: str = "default"
    borrowing: bool = False
    data: list[str] = Field(default_factory=list, description="data inputs as name@digest12")
    code: CodeInfo | None = Field(default=None, description="the code snapshot; None: live")
    image: str | None = Field(default=None, description="the container image it runs in")
    image_digest: str | None = Field(default=None, description="that image's ID (sha256:...)")
    sandbox: str | None = Field(
        default=None, description="what it runs in: bwrap, or none (why); None: not local"
    )
    hardware: dict[str, Any] | None = Field(
        default=None,
        description="what it ran on: gpu_model, gpu_count, class, driver, cuda, cpu, host,"
        " backend (air_skills/gpu/hardware.py); None before it starts or off this machine",
    )
    launched_by: str | None = Field(
        default=None, description="who launched it: an air-mcp token's name, or the local user"
    )
    outputs: list[str] = Field(
        default_factory=list,
        description="folders it writes: AIR_CHECKPOINT_DIR, and ./checkpoints, ./runs, ... in"
        " its code view (kept with the job until it is removed)",
    )

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal()


class GpuInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    name: str
    memory_mb: int
    health: Literal["ok", "unhealthy"] = "ok"
    cordoned: bool = False
    reason: str | None = None
    job_ids: list[str] = Field(default_factory=list)
    project: str | None = None  # of the job holding it
    borrowing: bool = False  # held by a job beyond its project's quota


def utc_from_ts(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)
