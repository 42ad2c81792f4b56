"""The one error hierarchy of AIR Skills: every failure an agent or a user can act on.

    AirError                      code, message, hint, retryable, context
    ├── InvalidInput              bad input: exit 2 in the CLI, isError in MCP
    │   ├── InvalidSpec           a job spec or study file that does not validate (all problems)
    │   ├── InsufficientGpus      more GPUs than the pool (or cluster) has
    │   ├── DataPathRefused       a data input outside AIR_DATA_ROOTS
    │   └── UnknownMetric         a metric key that the run never logged
    ├── NotFound                  a job id, run, study or GPU that does not exist
    ├── InvalidState              the action does not apply now (cancel a finished job)
    ├── StoreError                AIR_HOME missing, corrupt, read-only, or busy
    ├── BackendUnavailable        Ray not installed or unreachable (retryable)
    ├── TrackingUnavailable       the MLflow store cannot be reached (retryable)
    └── ProposerError             an LLM provider failed or a key is missing

Each error has a stable kebab-case ``code`` that agents can branch on, a ``message``
(what happened) and a ``hint`` (what to call or change next).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class AirError(Exception):
    """Base of every AIR Skills error."""

    code = "air-error"
    retryable = False
    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        code: str | None = None,
        retryable: bool | None = None,
        **context: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.context = {k: v for k, v in context.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "retryable": self.retryable,
            **({"context": self.context} if self.context else {}),
        }

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}" + (f" Next: {self.hint}" if self.hint else "")


class InvalidInput(AirError):
    code = "invalid-input"
    exit_code = 2


class InvalidSpec(InvalidInput):
    """A spec that does not validate; ``problems`` lists every one at once."""

    code = "invalid-spec"

    def __init__(self, message: str, *, problems: list[str] | None = None, **kw: Any) -> None:
        self.problems = problems or []
        if self.problems and message.endswith(":"):
            message = message + " " + "; ".join(self.problems)
        super().__init__(message, problems=self.problems or None, **kw)


class InsufficientGpus(InvalidInput):
    code = "insufficient-gpus"


class DataPathRefused(InvalidInput):
    code = "data-path-refused"


class UnknownMetric(InvalidInput):
    code = "unknown-metric"


class NotFound(AirError):
    code = "not-found"
    exit_code = 2


class InvalidState(AirError):
    code = "invalid-state"


class StoreError(AirError):
    code = "store-error"


class BackendUnavailable(AirError):
    code = "backend-unavailable"
    retryable = True


class TrackingUnavailable(AirError):
    code = "tracking-unavailable"
    retryable = True


class ProposerError(AirError):
    code = "proposer-error"


def pydantic_problems(exc: Any, valid: Iterable[str] = ()) -> list[str]:
    """Every problem of a pydantic ValidationError as one readable line each.

    ``valid``: the model's field names; an unknown top-level field is followed by a
    did-you-mean line (joined: ``gpu: unknown field; did you mean gpus?``), so every surface
    that validates with it (spec files, Client dicts, MCP arguments) gets it, once.
    """
    import difflib

    names = list(valid)
    problems = []
    for err in exc.errors():
        path = err.get("loc", ())
        loc = ".".join(str(p) for p in path) or "(root)"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        problems.append(f"{loc}: {msg}")
        # A prefix first ("prio" is short for priority), then the closest spelling.
        close = [n for n in names if n.startswith(loc)][:1] or difflib.get_close_matches(
            loc, names, n=1
        )
        close = close if len(path) == 1 else []
        if msg == "unknown field" and close:
            # Its own line: "gpu: unknown field" stays the line that names the problem.
            problems.append(f"did you mean {close[0]}?")
    return problems


# --- the one renderer ---------------------------------------------------------------------------
# Every entry point (`air`, `autoresearch`, `air-mcp`, the Ray settings command) prints errors
# through these two functions: `[code] what happened`, each problem on its own line, then
# `Next: what to do`; with --json, `{"error": {...}}`.

DEFAULT_NEXT = "change the call as the message says"
RETRY_NEXT = "retry in a few seconds"


def render_text(exc: AirError, *, max_chars: int | None = None, wording: Any = None) -> str:
    """``[code] message``, the problems not already in the message, then ``Next: hint``.

    ``max_chars`` bounds the message and the hint (MCP replies); ``wording`` rewrites both
    (MCP names its tools where the CLI names commands).
    """
    message, hint = exc.message, exc.hint or (RETRY_NEXT if exc.retryable else DEFAULT_NEXT)
    if wording is not None:
        message, hint = wording(message), wording(hint)
    if max_chars is not None:
        if len(message) > max_chars:
            message = message[:max_chars] + " ..."
        hint = hint[:max_chars]
    lines = [f"[{exc.code}] {message}"]
    problems = list(getattr(exc, "problems", None) or [])
    if problems and not exc.message.endswith("; ".join(problems)):
        if max_chars is not None:  # bounded like the message: at most 10 short lines
            problems = [p[:200] for p in problems[:10]]
        lines += [f"  - {p}" for p in problems]
    lines.append(f"Next: {hint}")
    return "\n".join(lines)


def render_json(exc: AirError) -> str:
    """``{"error": {code, message, hint, retryable, context}}`` on one line."""
    import json

    return json.dumps({"error": exc.to_dict()}, default=str)
