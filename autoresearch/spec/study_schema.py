"""The study file's schema: what to search, how to judge a trial, the budgets that bound it.

Strict pydantic v2 models: an unknown key or a changed type is an error, and every problem in a
file is reported at once. Every key but ``name``, ``command``, ``search_space`` and ``objective``
has a default; ``proposer`` and ``early_stopping`` may be written as a bare word (``tpe``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from air_skills.models import DataInput, split_command
from air_skills.vocabulary import NAME_PATTERN, Direction, better
from autoresearch.spec.stall import StallConfig

Scalar = str | int | float | bool | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- the search space --------------------------------------------------------------------------


def _check_range(low: float, high: float, log: bool) -> None:
    """Every problem of a numeric range at once (ints are always finite)."""
    problems = []
    if not (math.isfinite(low) and math.isfinite(high)):
        problems.append("low and high must be finite numbers")
    elif low >= high:
        problems.append(f"low ({low}) must be below high ({high})")
    if log and low <= 0:
        problems.append(f"log scale needs low > 0 (got {low})")
    if problems:
        raise ValueError("\n".join(problems))


class FloatParam(_Strict):
    """A real value in [low, high]; ``log`` samples evenly in log space (low must be > 0)."""

    type: Literal["float"]
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        return self


class IntParam(_Strict):
    """An integer in [low, high], both included."""

    type: Literal["int"]
    low: int
    high: int
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        return self


class ChoiceParam(_Strict):
    """One of a list of plain values (strings, numbers, booleans)."""

    type: Literal["choice"]
    values: list[Scalar] = Field(min_length=1)

    @field_validator("values")
    @classmethod
    def _unique(cls, values: list[Scalar]) -> list[Scalar]:
        seen: list[tuple[str, Scalar]] = []
        for v in values:
            key = (type(v).__name__, v)
            if key in seen:
                raise ValueError(f"value {v!r} is listed twice")
            seen.append(key)
        return values


Param = Annotated[FloatParam | IntParam | ChoiceParam, Field(discriminator="type")]


# --- the other sections ------------------------------------------------------------------------


class Holdout(_Strict):
    """The held-out evaluation, made only after the search (the final re-evaluation's runs,
    which get ``AIR_EVAL_SPLIT=test``): ``metric`` the job logs then, or ``command`` run like
    the trusted evaluator on the run's checkpoint folder and printing ``metric`` in its
    ``---`` block. ``data``: the held-out inputs, bound (read-only) into those runs only and
    hidden from the search's sandboxed trials."""

    metric: str = Field(min_length=1)
    command: list[str] | None = None
    timeout_min: float = Field(default=10.0, gt=0)
    data: list[DataInput] = Field(default_factory=list)

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return None if value is None else split_command(value)


class Objective(_Strict):
    """The metric that judges a trial (its last logged value), and which way is better."""

    metric: str = Field(min_length=1)
    direction: Direction = "minimize"
    step_metric: str | None = Field(
        default=None, min_length=1, description="intermediate metric for early stopping"
    )
    # the held-out metric (a name, or {metric, command, data}): never seen by the search
    holdout: Holdout | None = None

    @field_validator("holdout", mode="before")
    @classmethod
    def _bare_holdout(cls, value: Any) -> Any:
        return {"metric": value} if isinstance(value, str) else value

    @property
    def curve_metric(self) -> str:
        return self.step_metric or self.metric

    def better(self, a: float, b: float) -> bool:
        """True when ``a`` is strictly better than ``b``."""
        return better(a, b, self.direction)


class Budget(_Strict):
    """Hard limits; the loop stops cleanly at the first one spent. ``None`` means no limit."""

    trials: int = Field(default=20, ge=1, le=100_000)  # trials launched, baseline included
    concurrency: int = Field(default=2, ge=1, le=1024)  # trials running at once
    wall_time_min: float | None = Field(default=None, gt=0)  # minutes the loop runs in all
    gpu_hours: float | None = Field(default=None, gt=0)  # GPU-hours the trials use in all
    llm_usd: float = Field(default=1.0, ge=0)  # dollars spent on LLM calls


class Price(_Strict):
    """Dollars per million tokens, for a model the price table does not know."""

    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)


class RandomProposerConfig(_Strict):
    type: Literal["random"]
    seed: int = 0


class TpeProposerConfig(_Strict):
    type: Literal["tpe"]
    seed: int = 0
    n_startup_trials: int | None = Field(default=None, ge=1)  # default: from the budget


class LlmProposerConfig(_Strict):
    type: Literal["llm"]
    provider: Literal["anthropic", "openai"] = "anthropic"
    model: str | None = Field(default=None, min_length=1)  # default per provider
    base_url: str | None = Field(default=None, min_length=1)  # any OpenAI-compatible server
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    max_tokens: int = Field(default=4096, ge=256, le=128_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_retries: int = Field(default=3, ge=0, le=10)  # HTTP retries (429, 5xx) with back-off
    timeout_s: float = Field(default=120.0, gt=0)
    fallback: Literal["tpe", "random"] = "tpe"
    seed: int = 0
    price: Price | None = None

    @property
    def resolved_model(self) -> str:
        if self.model:
            return self.model
        return "claude-sonnet-4-6" if self.provider == "anthropic" else "gpt-5-mini"

    @property
    def key_env(self) -> str:
        if self.api_key_env:
            return self.api_key_env
        return "ANTHROPIC_API_KEY" if self.provider == "anthropic" else "OPENAI_API_KEY"


ProposerConfig = Annotated[
    RandomProposerConfig | TpeProposerConfig | LlmProposerConfig, Field(discriminator="type")
]
PROPOSER_TYPES = ("tpe", "random", "llm")
PARAM_TYPES = ("float", "int", "choice")


class EarlyStopping(_Strict):
    """Median rule: stop a trial whose best ``step_metric`` so far is worse than the median of
    the finished trials at the same step, once it has reached ``min_steps``."""

    type: Literal["median", "none"] = "median"
    min_steps: int = Field(default=0, ge=0)  # no trial is stopped before this step
    min_trials: int = Field(default=3, ge=1)  # finished trials needed at that step


class Noise(_Strict):
    """Re-runs of the baseline with other seeds; an improvement counts only beyond the floor.

    With ``confirm_seeds`` > 0 a candidate that beats the best by less than ``confirm_margin``
    x the floor (every candidate with ``confirm: always``) is re-run with that many more seeds
    before it is kept: screen, then confirm.
    """

    repeats: int = Field(default=0, ge=0, le=50)  # extra runs of the base config
    sigmas: float = Field(default=2.0, gt=0)  # floor = sigmas x standard deviation
    seed_key: str = Field(default="seed", min_length=1)  # the config key that holds the seed
    confirm: Literal["margin", "always"] = "margin"
    # x the floor; closer wins are re-run (3: tuned by bench/confirm.py, see bench/README.md)
    confirm_margin: float = Field(default=3.0, ge=0)
    confirm_seeds: int = Field(default=0, ge=0, le=20)  # 0: no confirmation runs


class Final(_Strict):
    """The final selection by re-evaluation, when the search ends: the ``top_k`` best configs
    within the noise floor of each other and the baseline, each re-run with ``seeds`` fresh
    seeds (the same ones for all: paired); the winner is the best mean on the objective.
    Its runs are its own budget, apart from ``budget.trials``."""

    top_k: int = Field(default=3, ge=1, le=20)
    seeds: int = Field(default=3, ge=1, le=20)
    off: bool = False  # `final: false`: no final re-evaluation, even with a holdout


# How a trial is kept during the search: noise-floor (beats the best by more than the floor,
# noise.sigmas x std), k-sigma(k) (by more than k x std), paired-test(alpha) (a one-sided test
# at level alpha: z for one run, paired t over the confirmation runs' seeds).
ACCEPT_PATTERN = r"^(noise-floor|k-sigma\((\d+(\.\d*)?|\.\d+)\)|paired-test\((0?\.\d+)\))$"


class CodeSection(_Strict):
    """Code-level trials: the LLM may patch ``editable`` files, never ``protected`` ones.

    Globs use .gitignore syntax against paths from the snapshot's root (``train.py`` matches
    at any depth, ``src/**/*.py`` is anchored). ``context_kb`` bounds the editable files'
    text in the prompt; bigger files are shown as an outline plus the parts trials touched.
    """

    editable: list[str] = Field(min_length=1)
    protected: list[str] = Field(default_factory=list)
    context_kb: int = Field(default=48, ge=1, le=1024)
    max_patch_kb: int = Field(default=64, ge=1, le=1024)  # a bigger patch is refused

    @field_validator("editable", "protected")
    @classmethod
    def _globs(cls, globs: list[str]) -> list[str]:
        for g in globs:
            if not g.strip() or g.startswith("!") or "\x00" in g:
                raise ValueError(f"{g!r} is not a glob (no empty, negated or NUL patterns)")
        return globs


class Evaluate(_Strict):
    """A trusted evaluator, run after a trial succeeds: from the base snapshot's code (not the
    trial's), with the trial's AIR_CHECKPOINT_DIR; its ``---`` summary block gives the
    objective."""

    command: list[str] = Field(min_length=1)
    timeout_min: float = Field(default=10.0, gt=0)

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return split_command(value)


class Study(_Strict):
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
