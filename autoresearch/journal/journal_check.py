"""The check between parsing a journal line and folding it into the study's state: a record
of the wrong shape is skipped with its reason, so a hand-edited journal never breaks a study.

Each event kind lists the fields ``StudyState.apply`` reads and what each must be; the trial
events must also fit the trials before them (proposed, launched, ended, decided: never
backwards, so a line appended for a decided trial cannot re-finish it). A record either passes
whole and applies whole, or is skipped whole. Plain type tests, no model per line: a journal
has thousands of lines and every ``status`` replays all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class _Status(Protocol):
    def is_final(self) -> bool: ...


class Trial(Protocol):
    """What the checks read of a journal's trial (journal.Trial has it; no import back)."""

    job_id: str | None
    status: _Status
    job_done: bool
    decision: str | None


MAX_TRIAL = 2**31  # a trial number past this only makes the next number absurd
MAX_DEPTH = 32  # nesting of a free-form value (config, study): deeper breaks printing it
FINAL = ("SUCCEEDED", "FAILED", "PRUNED", "CANCELLED")

Check = tuple[str, Callable[[Any], bool]]  # (what it must be, the test)


def _depth_ok(value: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    if type(value) is dict:
        return all(_depth_ok(v, depth + 1) for v in value.values())
    if type(value) is list:
        return all(_depth_ok(v, depth + 1) for v in value)
    return True


def _is_num(v: Any) -> bool:
    return type(v) is float or type(v) is int  # json gives exact types; a bool is no number


def _is_pair(p: Any) -> bool:
    return type(p) is list and len(p) == 2 and _is_num(p[0]) and _is_num(p[1])


def _is_curve(v: Any) -> bool:
    """A list of [step, value] pairs; inlined: a finished trial's curve has up to 200."""
    if type(v) is not list:
        return False
    for p in v:
        if type(p) is not list or len(p) != 2:
            return False
        a, b = p
        if (type(a) is not float and type(a) is not int) or (
            type(b) is not float and type(b) is not int
        ):
            return False
    return True


def _is_files(v: Any) -> bool:
    return type(v) is dict and all(_is_pair(c) for c in v.values())


STR: Check = ("a string", lambda v: type(v) is str)
BOOL: Check = ("true or false", lambda v: type(v) is bool)
NUM: Check = ("a number", _is_num)
FINITE: Check = ("a finite number", lambda v: _is_num(v) and math.isfinite(v))
COUNT: Check = ("a non-negative finite number", lambda v: _is_num(v) and 0 <= v < math.inf)
NAT: Check = ("a non-negative integer", lambda v: type(v) is int and 0 <= v < MAX_TRIAL)
OBJ: Check = (
    f"an object nested at most {MAX_DEPTH} deep",
    lambda v: type(v) is dict and _depth_ok(v),
)
STRS: Check = ("a list of strings", lambda v: type(v) is list and all(type(s) is str for s in v))
NUMS: Check = ("a list of numbers", lambda v: type(v) is list and all(_is_num(x) for x in v))
NATS: Check = (
    "a list of non-negative integers",
    lambda v: type(v) is list and all(NAT[1](x) for x in v),
)
LIST: Check = ("a list", lambda v: type(v) is list and _depth_ok(v))
CURVE: Check = ("a list of [step, value] pairs", _is_curve)
METRICS: Check = (
    "an object of numbers",
    lambda v: type(v) is dict and all(_is_num(x) for x in v.values()),
)
PROTECTED: Check = (
    "an object of strings",
    lambda v: type(v) is dict and all(type(x) is str for x in v.values()),
)
PATCH_SUMMARY: Check = (
    'an object with "files": {path: [added, removed]}',
    lambda v: type(v) is dict and _is_files(v.get("files")),
)
CONFIRMED: Check = (
    'an object with "mean", "std" (numbers) and "n" (a count)',
    lambda v: (
        type(v) is dict
        and (
            not v.get("n") or (NAT[1](v["n"]) and _is_num(v.get("mean")) and _is_num(v.get("std")))
        )
    ),
)
STATUS: Check = ("one of " + ", ".join(FINAL), lambda v: v in FINAL)

# How a field may appear: REQ present and not null; SET absent or valid (apply falls back to a
# default when absent, so null is refused); OPT absent, null or valid.
REQ, SET, OPT = "required", "set", "optional"

FIELDS: dict[str, dict[str, tuple[Check, str]]] = {
    "session_started": {"study": (OBJ, OPT), "study_id": (STR, OPT), "gpus_per_trial": (NAT, OPT)},
    "mlflow_parent": {"run_id": (STR, OPT), "experiment_id": (STR, OPT)},
    "study_updated": {"study": (OBJ, OPT)},
    "proposal": {
        "trial": (NAT, REQ),
        "diff": (OBJ, OPT),
        "config": (OBJ, OPT),
        "source": (STR, SET),
        "rationale": (STR, SET),
        "patch": (STR, OPT),
        "parent": (NAT, OPT),
        "patch_summary": (PATCH_SUMMARY, OPT),
        "confirms": (NAT, OPT),
        "final_of": (NAT, OPT),
    },
    "code_base": {
        "digest": (STR, REQ),
        "root": (STR, REQ),
        "cwd": (STR, REQ),
        "code": (OBJ, REQ),
        "editable": (STRS, SET),
        "protected": (PROTECTED, SET),
        "mode": (STR, OPT),
        "commit": (STR, OPT),
    },
    "tampered": {"trial": (NAT, REQ), "files": (STRS, OPT)},
    "launched": {
        "trial": (NAT, REQ),
        "job_id": (STR, REQ),
        "run_id": (STR, OPT),
        "attempt": (NAT, SET),
        "gpus": (NAT, SET),
        "code_digest": (STR, OPT),
        "gpu_type": (STR, OPT),
    },
    "launch_refused": {"trial": (NAT, REQ), "failure": (STR, REQ), "failure_kind": (STR, OPT)},
    "job_started": {"trial": (NAT, REQ), "started_at": (FINITE, OPT)},
    "infra_retry": {"trial": (NAT, REQ), "gpu_s": (COUNT, SET)},
    "pruned": {
        "trial": (NAT, REQ),
        "value": (NUM, OPT),
        "step": (NUM, OPT),
        "reason": (STR, OPT),
        "curve": (CURVE, OPT),
    },
    "finished": {
        "trial": (NAT, REQ),
        "status": (STATUS, REQ),
        "value": (NUM, OPT),
        "steps": (NUM, OPT),
        "failure": (STR, OPT),
        "failure_kind": (STR, OPT),
        "log_tail": (STR, OPT),
        "started_at": (FINITE, OPT),
        "ended_at": (FINITE, OPT),
        "curve": (CURVE, OPT),
        "metrics": (METRICS, OPT),
        "gpu_s": (COUNT, SET),
        "run_id": (STR, OPT),
    },
    "decision": {
        "trial": (NAT, REQ),
        "decision": (STR, REQ),
        "confirmed": (CONFIRMED, OPT),
        "best_value": (NUM, OPT),
        "value": (NUM, OPT),
        "rule": (STR, OPT),
    },
    "final_started": {"finalists": (NATS, REQ), "seeds": (LIST, REQ), "reason": (STR, OPT)},
    "final_done": {"winner": (NAT, OPT), "configs": (LIST, SET), "reason": (STR, OPT)},
    "holdout_leak": {"trial": (NAT, REQ), "metric": (STR, OPT)},
    "holdout_read": {"trial": (NAT, REQ), "split": (STR, OPT), "studies": (NAT, OPT)},
    "noise_floor": {"values": (NUMS, SET), "std": (FINITE, OPT), "floor": (COUNT, OPT)},
    "llm_call": {
        "usd": (COUNT, SET),
        "input_tokens": (NAT, OPT),
        "output_tokens": (NAT, OPT),
        "ok": (BOOL, SET),
    },
    "fallback": {"count": (NAT, SET)},
    "warning": {"message": (STR, SET)},
    # the study's check of its own results (loop/waste.py): code, what it saw, the fix
    "check": {
        "code": (STR, REQ),
        "message": (STR, REQ),
        "fix": (STR, SET),
        "trials": (NUMS, SET),
        "stop": (BOOL, SET),
    },
    "error": {"code": (STR, OPT), "message": (STR, OPT), "hint": (STR, OPT)},
    "stopped": {"reason": (STR, REQ), "detail": (STR, OPT)},
}
# The events about one trial, and those only a launched trial can have (the loop writes them
# after its ``launched`` line; a decision comes after the trial has ended).
TRIAL_EVENTS = ("proposal", "tampered", "launched", "launch_refused", "job_started",
                "infra_retry", "pruned", "finished", "decision")  # fmt: skip
LAUNCHED_ONLY = ("tampered", "job_started", "infra_retry", "pruned", "finished")
NO_FIELDS: dict[str, tuple[Check, str]] = {}


def _shown(value: Any) -> str:
    """A short quote of a bad value; never the repr of a deep or huge one (that can raise)."""
    if type(value) is dict:
        return f"an object of {len(value)} key(s)"
    if type(value) is list:
        return f"a list of {len(value)} item(s)"
    text = repr(value[:40] if type(value) is str else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field_problem(ev: dict[str, Any], kind: str) -> str | None:
    for name, ((what, test), how) in FIELDS.get(kind, NO_FIELDS).items():
        if name not in ev:
            if how == REQ:
                return f"{kind}: {name!r} is missing"
            continue
        value = ev[name]
        if value is None and how == OPT:
            continue
        if value is None or not test(value):
            return f"{kind}: {name!r} must be {what}, not {_shown(value)}"
    return None


def _trial_problem(ev: dict[str, Any], kind: str, trials: Mapping[int, Trial]) -> str | None:
    """How a trial event does not fit the trials before it (the loop writes them in order)."""
    n = ev["trial"]
    if kind == "proposal":
        if n in trials:
            return f"proposal: trial {n} was already proposed"
        for key in ("parent", "confirms", "final_of"):
            if ev.get(key) is not None and ev[key] not in trials:
                return f"proposal: {key} {ev[key]} is no trial before it"
        return None
    trial = trials.get(n)
    if trial is None:
        return f"{kind}: trial {n} was never proposed"
    if kind in LAUNCHED_ONLY and trial.job_id is None:
        return f"{kind}: trial {n} was never launched"
    if kind == "decision" and not trial.status.is_final():
        return f"decision: trial {n} has not ended"
    return _backwards(kind, n, trial)


def _backwards(kind: str, n: int, trial: Trial) -> str | None:
    """How an event would take a trial back in its life (proposed, launched, ended, decided;
    a pruned trial's job may still end after it): a line appended by hand, never the loop's."""
    if trial.decision is not None and kind != "tampered":
        return f"{kind}: trial {n} was already decided ({trial.decision})"
    ended = trial.status.is_final()
    if kind in ("launched", "launch_refused", "pruned", "infra_retry") and ended:
        return f"{kind}: trial {n} has already ended"
    if kind in ("finished", "job_started", "infra_retry") and ended and trial.job_done:
        return f"{kind}: trial {n}'s job has already ended"
    return None


def problem(ev: Any, trials: Mapping[int, Trial]) -> str | None:
    """Why the record ``ev`` cannot be applied to a study whose trials so far are ``trials``;
    None when it can. Unknown event kinds pass: they change nothing but the clock."""
    if type(ev) is not dict:
        return f"not an event object: {_shown(ev)}"
    kind = ev.get("event")
    if type(kind) is not str:
        return f"'event' must be a string, not {_shown(kind)}"
    if "ts" in ev and not FINITE[1](ev["ts"]):
        return f"{kind}: 'ts' must be a finite number, not {_shown(ev['ts'])}"
    why = _field_problem(ev, kind)
    if why is not None:
        return why
    if "trial" in ev:
        if not NAT[1](ev["trial"]):
            return f"{kind}: 'trial' must be {NAT[0]}, not {_shown(ev['trial'])}"
        why = _trial_problem(ev, kind, trials) if kind in TRIAL_EVENTS else None
        if why is not None:
            return why
    return _meaning_problem(ev, kind)


def _meaning_problem(ev: dict[str, Any], kind: str) -> str | None:
    """The checks across fields: what makes a result or a best believable."""
    if kind == "finished" and ev["status"] == "SUCCEEDED" and not FINITE[1](ev.get("value")):
        return f"finished: a SUCCEEDED trial needs a finite 'value', not {_shown(ev.get('value'))}"
    if kind == "decision" and ev["decision"] in ("keep", "baseline"):
        best = ev.get("best_value", ev.get("value"))
        if not FINITE[1](best):
            return f"decision: a {ev['decision']} needs a finite 'best_value', not {_shown(best)}"
    if kind == "code_base":
        return _code_problem(ev["code"])
    return None


def _code_problem(section: dict[str, Any]) -> str | None:
    from pydantic import ValidationError

    from autoresearch.spec.study_sections import CodeSection

    try:
        CodeSection.model_validate(section)
    except ValidationError as exc:
        return f"code_base: 'code' is not a study's code section ({exc.error_count()} problem(s))"
    return None
