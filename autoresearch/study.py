"""The study file: what to search, how to judge a trial, and the budgets that bound the search.

Strict pydantic v2 models: an unknown key or a changed type is an error, and every problem in a
file is reported at once. Every key but ``name``, ``command``, ``search_space`` and ``objective``
has a default; ``proposer`` and ``early_stopping`` may be written as a bare word (``tpe``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from air_skills.errors import InvalidSpec, NotFound
from air_skills.models import DataInput, split_command

Scalar = str | int | float | bool | None
STUDIES_DIR = "studies"


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


class Objective(_Strict):
    """The metric that judges a trial (its last logged value), and which way is better."""

    metric: str = Field(min_length=1)
    direction: Literal["minimize", "maximize"] = "minimize"
    step_metric: str | None = Field(
        default=None, min_length=1, description="intermediate metric for early stopping"
    )

    @property
    def curve_metric(self) -> str:
        return self.step_metric or self.metric

    def better(self, a: float, b: float) -> bool:
        """True when ``a`` is strictly better than ``b``."""
        return a < b if self.direction == "minimize" else a > b


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
    """Re-runs of the baseline with other seeds; an improvement counts only beyond the floor."""

    repeats: int = Field(default=0, ge=0, le=50)  # extra runs of the base config
    sigmas: float = Field(default=2.0, gt=0)  # floor = sigmas x standard deviation
    seed_key: str = Field(default="seed", min_length=1)  # the config key that holds the seed


class Study(_Strict):
    """A study file, validated."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    command: list[str] = Field(min_length=1)  # argv; the config arrives in AIR_CONFIG_FILE
    workdir: str = "."  # relative to the folder the loop starts in
    base_config: dict[str, Any] = Field(default_factory=dict)
    search_space: dict[str, Param] = Field(min_length=1)
    objective: Objective
    budget: Budget = Field(default_factory=Budget)
    gpus_per_trial: int | None = Field(default=None, ge=0)  # None: 1 if the pool has GPUs, else 0
    proposer: ProposerConfig = Field(default_factory=lambda: TpeProposerConfig(type="tpe"))
    early_stopping: EarlyStopping = Field(default_factory=EarlyStopping)
    noise: Noise = Field(default_factory=Noise)
    program: str = ""  # free-text research notes for the LLM
    env: dict[str, str] = Field(default_factory=dict)  # extra environment for every trial
    trial_timeout_min: float | None = Field(default=None, gt=0)
    max_infra_retries: int = Field(default=1, ge=0, le=20)  # relaunches after GPU/host faults
    experiment: str | None = Field(default=None, min_length=1)  # MLflow experiment
    backend: Literal["local", "ray"] | None = None  # None: AIR_HOME's default (local)
    project: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    data: list[DataInput] = Field(default_factory=list)  # [{name, path}], as in a job spec

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        return split_command(value)

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

    @model_validator(mode="after")
    def _cross_checks(self) -> Study:
        problems = []
        for key, param in self.search_space.items():
            if key in self.base_config:
                problems += [
                    f"base_config.{key}: {p}"
                    for p in check_value(key, param, self.base_config[key])
                ]
        if self.noise.repeats and self.noise.seed_key in self.search_space:
            problems.append(
                f"noise.seed_key {self.noise.seed_key!r} is also in search_space; "
                "the noise repeats need to set it themselves"
            )
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


# --- loading -----------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """YAML with `1e-4` read as a number (YAML 1.1 wants `1.0e-4`, a classic trap)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise NotFound(
            f"no study file {path}",
            hint="give the path of a study YAML file (see examples/*/study.yaml)",
            path=str(path),
        ) from None
    except OSError as exc:
        raise InvalidSpec(f"cannot read study file {path}: {exc.strerror}") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidSpec(
            f"study file {path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}",
            problems=[f"YAML{where}: {getattr(exc, 'problem', exc)}"],
            hint="fix the YAML syntax",
        ) from None


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        # drop the discriminator tags pydantic puts in the location
        if len(loc) >= 3 and loc[0] == "search_space" and loc[2] in PARAM_TYPES:
            del loc[2]
        if len(loc) >= 2 and loc[0] == "proposer" and loc[1] in PROPOSER_TYPES:
            del loc[1]
        where = ".".join(loc)
        kind = err.get("type", "")
        msg = err.get("msg", "invalid")
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required key is missing"
        elif kind == "union_tag_not_found":
            msg = (
                "missing 'type' (float, int or choice)"
                if "search_space" in loc
                else ("missing 'type' (" + ", ".join(PROPOSER_TYPES) + ")")
            )
        elif kind == "union_tag_invalid":
            msg = f"unknown type {err.get('input', {}).get('type')!r}; " + (
                "use float, int or choice" if "search_space" in loc else "use tpe, random or llm"
            )
        elif kind == "string_pattern_mismatch" and loc == ["name"]:
            msg = (
                "use letters, digits, '_', '.', '-' (at most 100), starting with a letter or digit"
            )
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif kind == "too_short" and loc == ["search_space"]:
            msg = "the search space is empty: give at least one parameter"
        if isinstance(err.get("input"), str) and kind in ("float_type", "int_type"):
            msg += f" (got the text {err['input']!r})"
        for part in msg.split("\n"):
            out.append(f"{where}: {part}" if where else part)
    return out


def parse_study(data: Any, source: str = "study") -> Study:
    """Validate a study dict; raise InvalidSpec listing every problem at once."""
    if not isinstance(data, dict):
        raise InvalidSpec(
            f"{source} must be a mapping of keys to values, not {type(data).__name__}",
            problems=[f"(study): expected a mapping, got {type(data).__name__}"],
            hint="see examples/mlp/study.yaml for a study file",
        )
    try:
        return Study.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
        raise InvalidSpec(
            f"invalid {source}:",
            problems=problems,
            hint="fix the keys listed; valid top-level keys: " + ", ".join(Study.model_fields),
            valid_keys=list(Study.model_fields),
        ) from None


def check_runnable(study: Study, base: Path | None = None) -> Study:
    """Resolve ``workdir`` against ``base`` (default: cwd) and check that it and the script
    exist, so a typo fails now rather than as N failed trials."""
    base = base or Path.cwd()
    workdir = (base / study.workdir).expanduser().resolve()
    problems = []
    if not workdir.is_dir():
        problems.append(f"workdir: folder {workdir} does not exist")
    else:
        for arg in study.command[1:2]:
            if arg.endswith(".py") and not (workdir / arg).exists():
                problems.append(
                    f"command: script {arg} not found in workdir {workdir}"
                    " (workdir is relative to the folder you run from)"
                )
    if problems:
        raise InvalidSpec(
            f"study {study.name!r} cannot run:",
            problems=problems,
            hint="fix workdir or command, or run from the folder the study file expects",
        )
    return study.model_copy(update={"workdir": str(workdir)})


def load_study(source: str | Path | dict[str, Any], base: Path | None = None) -> Study:
    """A study from a YAML file, a study folder (its saved study.yaml) or a dict; validated."""
    if isinstance(source, dict):
        return parse_study(source, "inline study")
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "study.yaml").exists():
            from autoresearch.journal import Journal, replay

            saved = replay(Journal(path).read()).study
            if saved:
                return parse_study(saved, f"journal study in {path}")
        path = path / "study.yaml"
    return parse_study(read_yaml(path), f"study file {path}")


def default_study_dir(study: Study, base: Path | None = None) -> Path:
    return ((base or Path.cwd()) / STUDIES_DIR / study.name).resolve()


def dump_study(study: Study) -> str:
    return yaml.safe_dump(study.to_dict(), sort_keys=False, allow_unicode=True)
