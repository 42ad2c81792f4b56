"""The study file's sections (search-space parameters, objective, budget, proposer, noise, code)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from air_skills.models import DataInput, split_command
from air_skills.vocabulary import Direction, better

Scalar = str | int | float | bool | None


class Strict(BaseModel):
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


class FloatParam(Strict):
    """A real value in [low, high]; ``log`` samples evenly in log space (low must be > 0)."""

    type: Literal["float"]
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        return self


class IntParam(Strict):
    """An integer in [low, high], both included."""

    type: Literal["int"]
    low: int
    high: int
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        return self


class ChoiceParam(Strict):
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


class Holdout(Strict):
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


class Objective(Strict):
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


class Budget(Strict):
    """Hard limits; the loop stops cleanly at the first one spent. ``None`` means no limit."""

    trials: int = Field(default=20, ge=1, le=100_000)  # trials launched, baseline included
    concurrency: int = Field(default=2, ge=1, le=1024)  # trials running at once
    wall_time_min: float | None = Field(default=None, gt=0)  # minutes the loop runs in all
    gpu_hours: float | None = Field(default=None, gt=0)  # GPU-hours the trials use in all
    llm_usd: float = Field(default=1.0, ge=0)  # dollars spent on LLM calls


class Price(Strict):
    """Dollars per million tokens, for a model the price table does not know."""

    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)


class RandomProposerConfig(Strict):
    type: Literal["random"]
    seed: int = 0


class TpeProposerConfig(Strict):
    type: Literal["tpe"]
    seed: int = 0
    n_startup_trials: int | None = Field(default=None, ge=1)  # default: from the budget


class LlmProposerConfig(Strict):
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


class EarlyStopping(Strict):
    """Median rule: stop a trial whose best ``step_metric`` so far is worse than the median of
    the finished trials at the same step, once it has reached ``min_steps``."""

    type: Literal["median", "none"] = "median"
    min_steps: int = Field(default=0, ge=0)  # no trial is stopped before this step
    min_trials: int = Field(default=3, ge=1)  # finished trials needed at that step


class Noise(Strict):
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


class Final(Strict):
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


class CodeSection(Strict):
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


class Evaluate(Strict):
    """A trusted evaluator, run after a trial succeeds: from the base snapshot's code (not the
    trial's), with the trial's AIR_CHECKPOINT_DIR; its ``---`` summary block gives the
    objective."""

    command: list[str] = Field(min_length=1)
    timeout_min: float = Field(default=10.0, gt=0)

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return split_command(value)
