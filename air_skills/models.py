"""The job model: what a job asks for (JobSpec), where it stands (JobStatus, JobInfo).

Strict pydantic v2 models: unknown fields are refused, and every problem is reported at once.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

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

from air_skills import settings
from air_skills.errors import InvalidSpec, pydantic_problems
from air_skills.status import JobStatus
from air_skills.vocabulary import NAME_PATTERN

MAX_GPUS_PER_JOB = 1024
# A config is hyperparameters: far below these. They bound the check itself, so that a YAML
# alias bomb (a few hundred bytes that expand without end) or a self-referring anchor is
# refused in a fraction of a second instead of exhausting memory when written as JSON.
MAX_CONFIG_VALUES = 1_000_000
MAX_CONFIG_DEPTH = 200
Priority = Literal["low", "normal", "high"]
FailureKind = Literal["user", "infra"]
Backend = Literal["local", "ray", "slurm"]
# Validation context for a spec read back from a record: checks of this machine are skipped.
STORED = {"stored": True}
# What a terminal obeys instead of showing: C0 and C1 controls (ESC starts an escape sequence),
# DEL, and the bidi controls that reorder the text shown around them.
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# A Python interpreter's name: its gang runs torchrun under it (as runtime/gang.is_python says).
_PYTHON = re.compile(r"^python[0-9.]*$")


def split_command(value: Any) -> Any:
    """A command given as one string becomes argv by shlex: it is never run by a shell."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split command: {exc}") from exc
    return value


def _refused(kind: str, problem: str) -> PydanticCustomError:
    # A custom error keeps pydantic's "Value error, " prefix out of the problem line.
    return PydanticCustomError(kind, "{problem}", {"problem": problem})


def refuse_nul(value: str | None, what: str) -> str | None:
    """The OS cuts strings at a NUL byte (or refuses them): never let one reach it."""
    if value is not None and "\x00" in value:
        raise _refused("nul_byte", f"{what} holds a NUL byte (\\x00): remove it")
    return value


def _json_fix(what: str, value: Any) -> str:
    """Why ``value`` (named ``what``), a Python object JSON cannot hold, and what to write."""
    if isinstance(value, (set, frozenset)):
        return f"{what} is a set (!!set), which JSON cannot hold: write a list, e.g. [a, b]"
    if isinstance(value, (bytes, bytearray)):
        return f"{what} is binary data (!!binary), which JSON cannot hold: write a quoted string"
    text = str(value)[:60]
    return (
        f"{what} = {text} is a {type(value).__name__}, which JSON cannot hold:"
        f' quote it to pass it as text ("{text}")'
    )


def _json_key(key: str | float | None) -> str | None:
    """The text JSON writes for a mapping key (1 -> "1", True -> "true"); None: not finite."""
    if isinstance(key, str):
        return key
    if isinstance(key, float) and not math.isfinite(key):
        return None
    return json.dumps(key)


def json_problem(config: Mapping[str, Any]) -> str | None:
    """Why ``config`` cannot be written as JSON (naming the key), or None when it can.

    YAML turns ``2024-01-01`` into a date, ``!!set`` into a set and ``!!binary`` into bytes;
    JSON holds none of them, and the job reads its config as JSON (AIR_CONFIG_FILE).
    """
    stack: list[tuple[str, Any, int]] = [("config", config, 0)]
    seen = 0
    while stack:
        path, value, depth = stack.pop()
        seen += 1
        if seen > MAX_CONFIG_VALUES or depth > MAX_CONFIG_DEPTH:
            return (
                f"config is too large or too deep (over {MAX_CONFIG_VALUES} values or"
                f" {MAX_CONFIG_DEPTH} levels), or refers to itself (a YAML alias inside its"
                " own anchor): write it out plainly, without anchors and aliases"
            )
        if isinstance(value, float) and not math.isfinite(value):
            return (
                f"{path} = {value} is not a finite number, which JSON cannot hold:"
                f' give a number, or quote it to pass it as text ("{value}")'
            )
        if value is None or isinstance(value, (str, int, float)):
            continue  # bool is an int
        if isinstance(value, Mapping):
            names: dict[str, Any] = {}
            for key, item in value.items():
                if key is not None and not isinstance(key, (str, int, float)):
                    return _json_fix(f"a key under {path}", key)
                name = _json_key(key)
                if name is None:
                    return f"a key under {path} ({key}) is not a finite number: quote it"
                if name in names:
                    return (
                        f"{path} has two keys that JSON writes as {name!r} ({names[name]!r}"
                        f" and {key!r}; JSON keys are text): keep one"
                    )
                names[name] = key
                stack.append((f"{path}.{key}", item, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
        else:
            return _json_fix(path, value)
    return None


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
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$",
        description="a container image (e.g. localhost/train:1): the job runs in it (podman or"
        " docker, AIR_CONTAINER_ENGINE)",
    )
    image_digest: str | None = Field(
        default=None,
        pattern=r"^(sha256:)?[0-9a-f]{8,64}$",
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
        return self.gpus if self.procs == "gpu" else self.procs

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
        return self.project or settings.get("AIR_PROJECT") or "default"


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


class LogChunk(BaseModel):
    job_id: str
    text: str
    offset: int = Field(description="byte offset where text starts")
    next_offset: int = Field(description="pass as offset to read on")
    size: int = Field(description="log size in bytes")
    truncated: bool = False


class Metrics(BaseModel):
    job_id: str
    run_id: str | None
    latest: dict[str, float] = Field(default_factory=dict)
    history: dict[str, list[list[float]]] = Field(default_factory=dict)


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None
    total: int | None = None  # jobs on every page with these filters (None: not counted)


def utc_from_ts(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)
