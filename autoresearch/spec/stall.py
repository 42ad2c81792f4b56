"""A study's ``stall`` key: how long its trials may go without progress, and what a stall does.

``stall: 20`` (minutes), ``stall: auto`` (from the finished trials' longest quiet gap, times
``factor``, never under ``floor_min``; until a trial has finished, AIR_STALL_TIMEOUT_MIN), or
``stall: {timeout_min: auto, factor: 3, floor_min: 5, on_stall: fail}``. ``0`` turns it off.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class StallConfig(BaseModel):
    """The study's stall rule for its trials (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # minutes (0: off), auto, or None: the runtime's default (AIR_STALL_TIMEOUT_MIN)
    timeout_min: Annotated[float, Field(ge=0, le=10080)] | Literal["auto"] | None = None
    factor: float = Field(default=3.0, ge=1, le=100)
    floor_min: float = Field(default=5.0, ge=0, le=10080)
    on_stall: Literal["fail", "retry", "notify"] | None = None

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """``auto`` or a number of minutes, as the full form."""
        if value == "auto" or (isinstance(value, int | float) and not isinstance(value, bool)):
            return {"timeout_min": value}
        return value

    def timeout_for(self, gaps_s: list[float]) -> float | None:
        """A trial's stall_timeout_min given the finished trials' longest gaps (seconds)."""
        if self.timeout_min != "auto":
            return self.timeout_min
        if not gaps_s:
            return None  # nothing measured yet: the runtime's default
        return max(self.floor_min, self.factor * max(gaps_s) / 60)
