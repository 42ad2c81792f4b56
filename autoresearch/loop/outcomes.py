"""A finished trial's job, turned into the trial's result: status, objective value, failure."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from air_skills.errors import UnknownMetric
from air_skills.runtime.supervision.stall_words import MARK as STALL_MARK
from autoresearch.journal.journal import Trial, TrialStatus


@dataclass
class Outcome:
    """The ``finished`` event's fields, and what the loop must still act on."""

    fields: dict[str, Any]
    logged: list[str] | None = None  # set when the run never logged the objective: what it did
    metric_seen: bool = False  # the run logged the objective (even a non-finite value)
    no_curve: bool = False  # step_metric has no history: early stopping cannot judge it


NON_FINITE = "non-finite"
# A value at float max is what an overflowed loss is clamped to (1.7976931348623157e+308):
# a diverged run, not a result.
OVERFLOW = sys.float_info.max


def usable(value: float | None) -> bool:
    """Whether an objective value counts: finite and below float max (not overflowed)."""
    return value is not None and math.isfinite(value) and abs(value) < OVERFLOW


def _summary_non_finite(log_text: str, metric: str) -> float | None:
    """The objective's nan or inf from the run's closing ``---`` block (the summary reader
    leaves such values out of MLflow), else None."""
    from air_skills.runtime.results.summary_block import parse_summary

    _, bad = parse_summary(log_text)
    if metric not in bad:
        return None
    for line in reversed(log_text.splitlines()):
        key, _, raw = line.partition(":")
        if key.strip() == metric:
            try:
                value = float(raw.strip())
            except ValueError:
                return None
            return value if not math.isfinite(value) else None
    return None


def ts(value: Any) -> float | None:
    """A datetime or a number as epoch seconds."""
    if value is None:
        return None
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def job_times(info: Any) -> tuple[float | None, float, float]:
    """(started, ended, GPU-seconds) of a job that has ended."""
    started = ts(info.started_at)
    ended = ts(info.ended_at) or time.time()
    gpu_s = max(0.0, ended - started) * len(info.gpus or []) if started else 0.0
    return started, ended, gpu_s


def wants_infra_retry(t: Trial, info: Any, max_infra_retries: int, stopping: bool) -> bool:
    """A job that the machine failed (not the trial's code) is relaunched, a few times."""
    return (
        str(info.status) == "FAILED"
        and info.failure_kind == "infra"
        and t.attempt <= max_infra_retries
        and not stopping
    )


def failure_reason(log_text: str, fallback: str) -> str:
    """The line of a log tail that says why: the last exception-like line, else the last one."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "Exception" in ln or ln.startswith(("error", "fatal", "Killed")):
            return ln[:300]
    return (lines[-1] if lines else fallback)[:300]


def trial_outcome(
    t: Trial,
    info: Any,
    *,
    metric: str,
    step_metric: str | None,
    latest: dict[str, float],
    curve: list[list[float]],
    cancel_reason: str | None,
    log_tail: Callable[[], str],
) -> Outcome:
    """The result of trial ``t`` whose job ``info`` has ended; ``latest`` are the run's last
    metric values, ``curve`` its objective curve; ``log_tail`` is read only for a failure."""
    started, ended, gpu_s = job_times(info)
    status = str(info.status)
    fields: dict[str, Any] = {
        "trial": t.number,
        "job_id": t.job_id,
        "run_id": info.run_id,
        "job_status": status,
        "started_at": started,
        "ended_at": ended,
        "gpu_s": round(gpu_s, 3),
        "message": info.message,
    }
    fields["metrics"] = latest
    fields["curve"] = curve or t.curve
    fields["steps"] = fields["curve"][-1][0] if fields["curve"] else None
    out = Outcome(fields)
    if cancel_reason == "pruned" or t.status == TrialStatus.PRUNED:
        fields["status"] = TrialStatus.PRUNED.value
        fields["value"] = t.value
    elif status == "SUCCEEDED":
        value = latest.get(metric)
        if value is None:
            value = _summary_non_finite(log_tail(), metric)  # nan/inf is never logged to MLflow
        if value is None:
            out.logged = sorted(latest)
            fields.update(
                status=TrialStatus.FAILED.value,
                failure_kind="user",
                failure=f"the run never logged the objective {metric!r}; it logged: "
                + (", ".join(out.logged) or "nothing"),
            )
            return out
        out.metric_seen = True
        if not usable(value):  # diverged: a failed trial, never a value, never best
            fields.update(
                status=TrialStatus.FAILED.value,
                failure_kind=NON_FINITE,
                failure=f"{NON_FINITE}: the objective {metric} is {value!r}"
                + (" (overflow: float max)" if math.isfinite(value) else ""),
            )
        else:
            fields.update(status=TrialStatus.SUCCEEDED.value, value=value)
        out.no_curve = bool(step_metric and not curve)
    elif cancel_reason is not None or status == "CANCELLED":
        fields.update(
            status=TrialStatus.CANCELLED.value,
            failure=f"cancelled: {cancel_reason}" if cancel_reason else info.message,
        )
    else:
        tail = log_tail()
        reason = info.message or status
        if status == "TIMED_OUT":
            reason = f"timed out: {info.message}"
        elif STALL_MARK in (info.message or ""):  # what it was doing when it stopped moving
            reason = info.message
        elif info.failure_kind != "infra":
            reason = failure_reason(tail, info.message or status)
        fields.update(
            status=TrialStatus.FAILED.value,
            failure=reason,
            failure_kind=info.failure_kind or "user",
            log_tail=tail[-4000:],
            exit_code=info.exit_code,
        )
    return out


def missing_metric_error(metric: str, t: Trial, logged: list[str]) -> UnknownMetric:
    """The error that stops a study whose first finished trial never logged its objective."""
    return UnknownMetric(
        f"the objective metric {metric!r} was never logged by trial {t.number}"
        f" (job {t.job_id}); it logged: {', '.join(logged) or 'nothing'}",
        hint="set objective.metric to one of the logged keys"
        f" ({', '.join(logged) or 'log metrics from the script'}), or log"
        f" {metric!r} from the script (MLflow or a `---` summary block)",
        key=metric,
        valid_keys=logged,
        job_id=t.job_id,
    )
