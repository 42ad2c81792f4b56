"""The study file's schema: what to search, how to judge a trial, the budgets that bound it.

Strict pydantic v2 models: an unknown key or a changed type is an error, and every problem in a
file is reported at once. Every key but ``name``, ``command``, ``search_space`` and ``objective``
has a default; ``proposer`` and ``early_stopping`` may be written as a bare word (``tpe``).
The sections (parameters, objective, budget, proposer, noise, code) are in ``study_sections``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from air_skills.models import DataInput, split_command
from air_skills.vocabulary import NAME_PATTERN
from autoresearch.spec.stall import StallConfig
from autoresearch.spec.study_sections import (
    ACCEPT_PATTERN,
    PROPOSER_TYPES,
    Budget,
    CodeSection,
    EarlyStopping,
    Evaluate,
    Final,
    FloatParam,
    IntParam,
    Noise,
    Objective,
    Param,
    ProposerConfig,
    Strict,
    TpeProposerConfig,
)


class Study(Strict):
    """A study file, validated."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    command: list[str] = Field(min_length=1)  # argv; the config: AIR_CONFIG_FILE and/or flags
    # relative: to the study file's folder (an inline study: the caller's folder); the
    # study's other relative paths (script, evaluator, data) are relative to the workdir
    workdir: str = "."
    base_config: dict[str, Any] = Field(default_factory=dict)
    # a job whose code (stored snapshot and patch) every trial runs, its config under base_config
    base_job: str | None = Field(default=None, min_length=1, max_length=200)
    code: CodeSection | None = None  # code-level trials (patches); None: config-only
    search_space: dict[str, Param]  # may be left out (or empty) in a study with `code`
    objective: Objective
    budget: Budget = Field(default_factory=Budget)
    gpus_per_trial: int | None = Field(default=None, ge=0)  # None: 1 if the pool has GPUs, else 0
    # Processes per trial, run as a torchrun gang (gpu: one per GPU); see JobSpec.procs.
    procs_per_trial: int | Literal["gpu"] = 1
    proposer: ProposerConfig = Field(default_factory=lambda: TpeProposerConfig(type="tpe"))
    early_stopping: EarlyStopping = Field(default_factory=EarlyStopping)
    noise: Noise = Field(default_factory=Noise)
    accept: str = Field(default="noise-floor", pattern=ACCEPT_PATTERN)  # see ACCEPT_PATTERN
    # the final re-evaluation; None: on when the objective has a holdout (`final: false`: off)
    final: Final | None = None
    program: str = ""  # free-text research notes for the LLM
    env: dict[str, str] = Field(default_factory=dict)  # extra environment for every trial
    trial_timeout_min: float | None = Field(default=None, gt=0)
    max_infra_retries: int = Field(default=1, ge=0, le=20)  # relaunches after GPU/host faults
    experiment: str | None = Field(default=None, min_length=1)  # MLflow experiment
    backend: Literal["local", "ray", "slurm"] | None = None  # None: AIR_HOME's default (local)
    project: str | None = Field(default=None, pattern=NAME_PATTERN)
    data: list[DataInput] = Field(default_factory=list)  # [{name, path}], as in a job spec
    image: str | None = Field(default=None, max_length=255)  # every trial runs in it (JobSpec)
    evaluate: Evaluate | None = None  # a trusted evaluator (needs `code`)
    # Trials' sandbox (JobSpec.sandbox): None is `on` for a code study (protected files or an
    # evaluator), else AIR_SANDBOX; `off` in a code study is journaled and reported.
    sandbox: Literal["on", "off"] | None = None
    network: bool = True  # false: trials run without a network (sandboxed)
    writable: list[str] = Field(default_factory=list)  # folders trials may write (JobSpec)
    # How a trial's config reaches the command (JobSpec.config_as): the file AIR_CONFIG_FILE,
    # --key=value flags after the command's own arguments, or both.
    config_as: Literal["file", "args", "both"] = "both"
    # Stop the study after this many trials failed the same way, none succeeding (0: never).
    stop_after_same_failures: int = Field(default=3, ge=0, le=1000)
    stall: StallConfig | None = None  # trials' stall timeout (spec/stall.py); None: the default
    # same: a trial that ran on another hardware class than the baseline is not judged against
    # it (decision "incomparable"); any: every trial is judged (a mixed pool, on purpose)
    hardware: Literal["same", "any"] = "same"
    # How ``workdir`` became absolute, for a not-found error ("workdir '.' resolved against
    # the study file's folder /x"); set by autoresearch.study.study.anchor_workdir, not a key.
    _workdir_note: str | None = PrivateAttr(default=None)
    # A study file's workdir as written, when relative: if nothing is found from the file's
    # folder, the folder the user runs from is tried too (DESIGN.md's "run from the repo root").
    _workdir_given: str | None = PrivateAttr(default=None)
    # What validation changed and says so (a holdout raises noise.repeats to 2)
    _notes: list[str] = PrivateAttr(default_factory=list)

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        return split_command(value)

    @model_validator(mode="before")
    @classmethod
    def _code_without_space(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("code") is not None and "search_space" not in data:
            return {**data, "search_space": {}}
        return data

    @field_validator("stall", mode="before")
    @classmethod
    def _bare_stall(cls, value: Any) -> Any:
        return StallConfig.coerce(value)

    @field_validator("evaluate", mode="before")
    @classmethod
    def _bare_evaluate(cls, value: Any) -> Any:
        return {"command": value} if isinstance(value, str | list) else value

    @field_validator("search_space")
    @classmethod
    def _space_or_code(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # a code study may search patches alone; a config-only study needs a space
        if not value and info.data.get("code") is None:
            raise ValueError("the search space is empty: give at least one parameter")
        return value

    @field_validator("proposer", mode="before")
    @classmethod
    def _bare_proposer(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value not in PROPOSER_TYPES:
                raise ValueError(
                    f"unknown proposer {value!r}; use one of {', '.join(PROPOSER_TYPES)}"
                )
            return {"type": value}
        return value

    @field_validator("early_stopping", mode="before")
    @classmethod
    def _bare_early_stopping(cls, value: Any) -> Any:
        if value is None or value is False:
            return {"type": "none"}
        if isinstance(value, str):
            return {"type": value}
        return value

    @field_validator("noise", mode="before")
    @classmethod
    def _bare_noise(cls, value: Any) -> Any:
        return {"repeats": 0} if value is None else value

    @field_validator("final", mode="before")
    @classmethod
    def _bare_final(cls, value: Any) -> Any:
        if value is True:
            return {}
        return None if value is False else value

    @model_validator(mode="before")
    @classmethod
    def _final_off(cls, data: Any) -> Any:
        # `final: false` is kept as a marker apart from "not given" (None: on with a holdout)
        if isinstance(data, dict) and data.get("final") is False:
            return {**data, "final": {"top_k": 1, "seeds": 1, "off": True}}
        return data

    @property
    def final_runs(self) -> Final | None:
        """The final re-evaluation's settings, or None when the study makes none."""
        if self.final is not None:
            return None if self.final.off else self.final
        return Final() if self.objective.holdout is not None else None

    @property
    def holdout_data(self) -> list[DataInput]:
        return list(self.objective.holdout.data) if self.objective.holdout else []

    @property
    def notes(self) -> list[str]:
        return list(self._notes)

    @model_validator(mode="after")
    def _cross_checks(self) -> Study:
        problems = []
        holdout = self.objective.holdout
        if holdout is not None:
            if self.noise.repeats < 2:  # its gap is only told from noise with a floor
                self._notes.append(
                    f"noise.repeats raised from {self.noise.repeats} to 2: a study with a"
                    " holdout needs a noise floor to tell a held-out gain from noise"
                )
                self.noise.repeats = 2
            if holdout.metric == self.objective.metric:
                problems.append(
                    "objective.holdout.metric must differ from objective.metric (the held-out"
                    " value is another number than the validation one)"
                )
            names = {d.name for d in self.data}
            for d in holdout.data:
                if d.name in names:
                    problems.append(f"objective.holdout.data: {d.name!r} is also in data")
        for key, param in self.search_space.items():
            if key in self.base_config:
                problems += [
                    f"base_config.{key}: {p}"
                    for p in check_value(key, param, self.base_config[key])
                ]
        if (self.noise.repeats or self.noise.confirm_seeds) and (
            self.noise.seed_key in self.search_space
        ):
            problems.append(
                f"noise.seed_key {self.noise.seed_key!r} is also in search_space; "
                "the noise repeats and confirmation runs need to set it themselves"
            )
        if self.code is not None:
            overlap = sorted(set(self.code.editable) & set(self.code.protected))
            if overlap:
                problems.append(
                    "code: editable and protected share "
                    + ", ".join(overlap)
                    + ": a file may not be both"
                )
        if self.evaluate is not None and self.code is None:
            problems.append(
                "evaluate: a trusted evaluator needs a `code` section (protected files)"
            )
        if isinstance(self.procs_per_trial, int) and self.procs_per_trial < 1:
            problems.append("procs_per_trial must be at least 1 (or 'gpu': one per GPU)")
        if self.procs_per_trial == "gpu" and self.gpus_per_trial == 0:
            problems.append("procs_per_trial: gpu runs one process per GPU: set gpus_per_trial")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def experiment_name(self) -> str:
        return self.experiment or f"autoresearch-{self.name}"

    def config_for(self, diff: dict[str, Any]) -> dict[str, Any]:
        return {**self.base_config, **diff}

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# --- values against the space ------------------------------------------------------------------


def check_value(key: str, param: Any, value: Any) -> list[str]:
    """Problems of one value against its parameter (empty when it fits)."""
    if isinstance(param, FloatParam):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return [f"{key}={value!r} has the wrong type: expected a number"]
        if not math.isfinite(value):
            return [f"{key}={value!r} is not a finite number"]
        if not param.low <= value <= param.high:
            return [f"{key}={value!r} is out of range [{param.low}, {param.high}]"]
        return []
    if isinstance(param, IntParam):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return [f"{key}={value!r} has the wrong type: expected an integer"]
        if isinstance(value, float) and not value.is_integer():
            return [f"{key}={value!r} has the wrong type: expected an integer"]
        if not param.low <= value <= param.high:
            return [f"{key}={value!r} is out of range [{param.low}, {param.high}]"]
        return []
    values = param.values
    if not any(type(v) is type(value) and v == value for v in values):
        if any(v == value and not isinstance(v, bool) for v in values):
            match = next(v for v in values if v == value)
            if isinstance(match, float) and isinstance(value, int) and not isinstance(value, bool):
                return []
        return [f"{key}={value!r} is not one of {values!r}"]
    return []
