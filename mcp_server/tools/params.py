"""Parameter types shared by the tool functions and their schemas (kept short: they are sent)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

JobId = Annotated[
    str,
    Field(description="a job id", max_length=200),
]
JobIds = Annotated[
    list[Annotated[str, Field(max_length=200)]],
    Field(min_length=1, max_length=100, description="job ids or a batch_id"),
]
ShortText = Annotated[str, Field(max_length=500)]
Arg = Annotated[str, Field(max_length=100_000)]
StatusName = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]
MetricName = Annotated[str | None, Field(max_length=250, description="its latest and best per job")]
Direction = Literal["minimize", "maximize"]


class AdvancedLaunch(BaseModel):
    """Rarely needed launch fields, in one object so that launch_job's schema stays small."""

    model_config = ConfigDict(extra="forbid")

    data: list[dict[str, ShortText]] | None = Field(
        default=None, max_length=100, description="[{name, path}]: seen as $AIR_DATA_DIR/name"
    )
    backend: Literal["local", "ray"] | None = Field(
        default=None, description="default: AIR_HOME's setting"
    )
    project: str | None = Field(default=None, max_length=64, description="for GPU quotas")
    preemptible: bool = Field(default=False, description="may be requeued for higher-priority jobs")
    config_as: Literal["file", "args", "both"] | None = None  # None: both (--key=value flags too)
