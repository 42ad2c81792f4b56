"""What a job asks for: JobSpec (and its DataInput), checked field by field.

Strict pydantic v2 models: unknown fields are refused, and every problem is reported at once.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from air_skills.errors import InvalidSpec, pydantic_problems
from air_skills.models.config_json import json_problem
from air_skills.models.spec_view import (
    CONTROL_CHARS,
    IMAGE_DIGEST_PATTERN,
    IMAGE_PATTERN,
    MAX_GPUS_PER_JOB,
    procs_per_node,
    resolved_project,
    split_command,
)
from air_skills.vocabulary import NAME_PATTERN

Priority = Literal["low", "normal", "high"]
FailureKind = Literal["user", "infra"]
Backend = Literal["local", "ray", "slurm"]
# Validation context for a spec read back from a record: checks of this machine are skipped.
STORED = {"stored": True}
# A Python interpreter's name: its gang runs torchrun under it (as runtime/gang.is_python says).
_PYTHON = re.compile(r"^python[0-9.]*$")


def _refused(kind: str, problem: str) -> PydanticCustomError:
    # A custom error keeps pydantic's "Value error, " prefix out of the problem line.
    return PydanticCustomError(kind, "{problem}", {"problem": problem})


def refuse_nul(value: str | None, what: str) -> str | None:
    """The OS cuts strings at a NUL byte (or refuses them): never let one reach it."""
    if value is not None and "\x00" in value:
        raise _refused("nul_byte", f"{what} holds a NUL byte (\\x00): remove it")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataInput(_Strict):
    """One data input: exposed to the job as $AIR_DATA_DIR/<name>."""

    name: str = Field(pattern=NAME_PATTERN)
    path: str = Field(min_length=1)
    digest: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{8,64}$",
        description="content digest, set at launch; given, the data must still match it",
    )

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        return refuse_nul(value, "a data path") or value


def _spec_hint(exc: ValidationError, fields: list[str]) -> dict[str, Any]:
    """What to do about a spec's problems: a bad choice names only that field's choices; the
    valid fields are listed only when a field is unknown."""
    errors = exc.errors()
    choices = [
        f"{'.'.join(map(str, e['loc']))} takes {e['ctx']['expected']}"
        for e in errors
        if e.get("type") == "literal_error" and "expected" in (e.get("ctx") or {})
    ]
    hint = "fix the fields listed" + (": " + "; ".join(choices) if choices else "")
    if any(e.get("type") == "extra_forbidden" for e in errors):
        return {"hint": hint + "; valid fields: " + ", ".join(fields), "valid_keys": fields}
    return {"hint": hint}


class JobSpec(_Strict):
    """What to run and what it needs. Build with ``JobSpec.parse(dict)`` for AIR errors."""

    command: list[str] = Field(min_length=1, description="argv; never run by a shell")
    name: str | None = Field(default=None, max_length=200)
    workdir: str | None = Field(default=None, description="working directory (default: cwd)")
    config: dict[str, Any] = Field(default_factory=dict, description="written to AIR_CONFIG_FILE")
    config_as: Literal["file", "args", "both"] = Field(
        default="both",
        description="how the config reaches the command: file (AIR_CONFIG_FILE), args"
        " (--key=value flags after its own arguments), both",
    )
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS_PER_JOB, description="GPUs per node")
    procs: int | Literal["gpu"] = Field(
        default=1,
        description="processes per node, run as a torchrun gang (gpu: one per GPU)",
    )
    nodes: int = Field(default=1, ge=1, le=1024, description="nodes (Ray backend only past 1)")
    cpus: int | None = Field(default=None, ge=1, le=1024, description="thread cap; default: share")
    priority: Priority = "normal"
    preemptible: bool = False
    timeout_min: float | None = Field(default=None, gt=0)
    max_retries: int = Field(default=0, ge=0, le=100)
    stall_timeout_min: float | None = Field(
        default=None,
        ge=0,
        le=10080,
        description="minutes without progress before the job is stalled (0: off; default:"
        " AIR_STALL_TIMEOUT_MIN)",
    )
    on_stall: Literal["fail", "retry", "notify"] | None = Field(
        default=None,
        description="what a stall does (default: retry once when a rank waits in a collective,"
        " else fail)",
    )
    env: dict[str, str] = Field(default_factory=dict)
    experiment: str | None = Field(default=None, max_length=500)
    tags: dict[str, str] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    backend: Backend = "local"
    project: str | None = Field(default=None, pattern=NAME_PATTERN)
    data: list[DataInput] = Field(default_factory=list)
    track: bool = Field(default=True, description="create an MLflow run for the job")
    deep_preflight: bool = Field(default=False, description="torch matmul/alloc check first")
    code: Literal["snapshot", "live"] = Field(
        default="snapshot",
        description="snapshot: run a private copy of the code as it was at launch; live: the"
        " workdir itself",
    )
    patch: str | None = Field(
        default=None,
        description="a unified diff applied to the job's snapshot only (never the user's tree)",
    )
    launched_by: str | None = Field(
        default=None,
        max_length=64,
        description="who launched it (set by the Client: a token's name or the local user)",
    )
    allow_duplicate: bool | None = Field(
        default=None,
        description="run it even when the same experiment is queued, running or done (default:"
        " AIR_DEDUP decides whether that is refused as a duplicate)",
    )
    image: str | None = Field(
        default=None,
        pattern=IMAGE_PATTERN,
        description="a container image (e.g. localhost/train:1): the job runs in it (podman or"
        " docker, AIR_CONTAINER_ENGINE)",
    )
    image_digest: str | None = Field(
        default=None,
        pattern=IMAGE_DIGEST_PATTERN,
        description="the image's ID, set at launch; given, the image must still have it",
    )
    sandbox: Literal["auto", "on", "off"] | None = Field(
        default=None,
        description="run in a bubblewrap sandbox: auto (when one can be made), on (refuse"
        " without one), off; default AIR_SANDBOX. Set to on/off at launch",
    )
    writable: list[str] = Field(
        default_factory=list,
        description="folders (under AIR_DATA_ROOTS) a sandboxed job may write besides its own",
    )
    disk_gb: float | None = Field(
        default=None,
        gt=0,
        description="GB its folder (checkpoints included) may hold, as allocated blocks; past"
        " it the job is stopped and FAILED (default AIR_JOB_DISK_GB: none)",
    )
    hidden: list[str] = Field(
        default_factory=list,
        description="paths a sandboxed job must not see (masked: a study's held-out data)",
    )
    network: bool = Field(default=True, description="false: a sandboxed job has no network")
    check_command: bool = Field(
        default=True,
        description="refuse a launch whose program or script is missing (false: the job"
        " creates its script at run time)",
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        return split_command(value)

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: list[str]) -> list[str]:
        if not value or not value[0].strip():
            raise ValueError("command is empty: give the program and its arguments")
        for arg in value:
            if "\x00" in arg:
                raise ValueError("command arguments cannot hold NUL bytes")
        return value

    @field_validator("name", "workdir", "experiment", "idempotency_key")
    @classmethod
    def _check_text(cls, value: str | None) -> str | None:
        return refuse_nul(value, "this field")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        found = CONTROL_CHARS.search(value or "")
        if found and not (info.context and info.context.get("stored")):  # older records: kept
            raise _refused(
                "control_char",
                f"the name holds a control character ({found.group()!a}), which a terminal"
                " would obey (an escape sequence) when `air ls` shows it: remove it",
            )
        return value

    @field_validator("config")
    @classmethod
    def _check_config(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = json_problem(value)
        if problem:
            raise _refused("not_json", problem)
        return value

    @field_validator("tags")
    @classmethod
    def _check_tags(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            refuse_nul(key, f"tag name {key!r}")
            refuse_nul(val, f"tag {key!r}")
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not key or "=" in key or "\x00" in key or "\x00" in val:
                raise ValueError(f"invalid environment variable {key!r}")
        return value

    @field_validator("data")
    @classmethod
    def _unique_data(cls, value: list[DataInput]) -> list[DataInput]:
        names = [d.name for d in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate data input names: {', '.join(dupes)}")
        return value

    @field_validator("procs")
    @classmethod
    def _check_procs(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_GPUS_PER_JOB:
            raise ValueError(f"procs must be between 1 and {MAX_GPUS_PER_JOB}, or 'gpu'")
        return value

    @model_validator(mode="after")
    def _check_gang(self, info: ValidationInfo) -> JobSpec:
        if self.procs == "gpu" and self.gpus < 1:
            raise _refused(
                "procs_gpu",
                "procs: gpu runs one process per GPU, and the job asks for none: set gpus",
            )
        if self.nodes > 1 and self.backend == "local":
            raise _refused(
                "nodes_local",
                "nodes > 1 needs a cluster: the local backend runs on this machine only;"
                " use backend 'ray' or 'slurm'",
            )
        stored = bool(info.context and info.context.get("stored"))  # a record read back
        if (
            not stored
            and self.procs_per_node() > 1
            and not _PYTHON.match(os.path.basename(self.command[0]))
        ):
            if importlib.util.find_spec("torch") is None:
                raise _refused(
                    "procs_torch",
                    f"procs > 1 runs {self.command[0]!r} (not a Python script) under torchrun"
                    f" with AIR's own Python ({sys.executable}), which cannot import torch:"
                    " pip install 'air-skills[torch]', or run a Python script (`python"
                    " train.py`) whose interpreter has torch",
                )
        return self

    def procs_per_node(self) -> int:
        """The number of processes on each node (``procs: gpu`` is one per GPU)."""
        return procs_per_node(self.gpus, self.procs)

    @model_validator(mode="after")
    def _patch_needs_snapshot(self) -> JobSpec:
        if self.patch is not None and self.code == "live":
            raise _refused(
                "patch_live",
                "patch applies to a code snapshot: drop `code: live` (or the patch)",
            )
        return self

    @classmethod
    def parse(cls, data: dict[str, Any] | JobSpec) -> JobSpec:
        """Validate ``data``; raise InvalidSpec listing every problem and the valid fields."""
        if isinstance(data, JobSpec):
            return data
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise InvalidSpec(
                "invalid job spec:",
                problems=pydantic_problems(exc, cls.model_fields),
                **_spec_hint(exc, list(cls.model_fields)),
            ) from None

    @classmethod
    def stored(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (a spec read back from a job folder) as the store keeps it; ValueError
        naming every problem when it does not validate (a rebuild skips that folder)."""
        try:
            return cls.model_validate(data, context=STORED).model_dump(mode="json")
        except ValidationError as exc:
            raise ValueError("its spec: " + "; ".join(pydantic_problems(exc))) from None

    def resolved_project(self) -> str:
        return resolved_project(self.project)
