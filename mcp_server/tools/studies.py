"""The study tools as plain functions over ``autoresearch.api``: no MCP in here.

``autoresearch`` is imported at call time, so the job tools work without it. Each function
takes the client first (as every tool does) and returns a ``StudyReply``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import time
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from air_skills.client import Client
from air_skills.errors import AirError, InvalidInput
from mcp_server.schemas import StudyReply

StudyDir = Annotated[
    str,
    Field(max_length=4096, description="its name, folder or file"),
]
PriorJobs = Annotated[
    list[Annotated[str, Field(max_length=200)]] | None,
    Field(max_length=100, description="hand-run job ids: join the history"),
]
MAX_STUDY_WAIT_S = 300.0
STUDY_POLL_S = 1.0
log = logging.getLogger("air_mcp")


def _study_api() -> Any:
    """``autoresearch.api``, imported at call time: the job tools work without it."""
    try:
        from autoresearch import api
    except ImportError as exc:
        raise AirError(
            f"the autoresearch API is not available ({exc})",
            code="unavailable",
            hint="install air-skills with its autoresearch package, or use the job tools",
        ) from None
    return api


def _not_text(exc: UnicodeDecodeError) -> InvalidInput:
    """A study file or journal that is not UTF-8: the caller's input, not a server crash."""
    return InvalidInput(
        f"a study file is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r}"
        f" at offset {exc.start})",
        hint="give a study folder whose study.yaml and journal.jsonl are UTF-8 text",
    )


def _study_call(name: str, *args: Any, **kwargs: Any) -> StudyReply:
    """``autoresearch.api.<name>(*args, **kwargs)`` as a reply; undecodable files are refused."""
    # The journal and study readers decode without catching UnicodeDecodeError (autoresearch's
    # to fix); until they do, it is caught here so that it reads as bad input, not a crash.
    try:
        return _study_reply(getattr(_study_api(), name)(*args, **kwargs))
    except UnicodeDecodeError as exc:
        raise _not_text(exc) from None


def trial_patch(study: str, trial: int) -> str:
    """A study trial's code as patches from the study's base, root first (a resource's text)."""
    try:
        return str(_study_api().trial_patch(study, trial))
    except UnicodeDecodeError as exc:
        raise _not_text(exc) from None


def _study_reply(result: Any) -> StudyReply:
    return StudyReply.model_validate(json.loads(json.dumps(result, default=str)))


def start_study(
    client: Client,
    study_file: Annotated[
        str | None,
        Field(
            max_length=4096,
            description="a study file or folder",
        ),
    ] = None,
    study: Annotated[
        dict[str, Any] | None,
        Field(description="the study inline: a study file's keys"),
    ] = None,
    study_dir: Annotated[
        str | None,
        Field(max_length=4096, description="journal folder (default studies/<name>)"),
    ] = None,
    resume: Annotated[bool, Field(description="continue a study that was stopped")] = False,
    prior_jobs: PriorJobs = None,
    base_job: Annotated[
        str | None, Field(max_length=200, description="a job whose code and config are the base")
    ] = None,
) -> StudyReply:
    """Start a study in the background. Keys: name, command, search_space, objective,
    budget, base_config, noise, code: resource air://docs/study."""
    if (study_file is None) == (study is None):
        raise InvalidInput(
            "give exactly one of study_file and study",
            hint="pass study_file='studies/x.yaml' or study={name:..., command:..., ...}",
        )
    source = study_file if study_file is not None else study
    extra: dict[str, Any] = {"prior_jobs": list(prior_jobs)} if prior_jobs else {}
    if base_job:
        extra["base_job"] = base_job
    reply = _study_call("start_study", source, study_dir, resume=resume, **extra)
    folder = getattr(reply, "study_dir", None)
    if folder and client.identity is not None and not resume:  # who may steer it
        from autoresearch.study.steer_requests import record_starter

        record_starter(folder, client.identity.name)
    return reply


def steer_study(
    client: Client,
    study: StudyDir,
    note: Annotated[str | None, Field(max_length=4000, description="for the proposer")] = None,
    enqueue: Annotated[
        list[dict[str, Any]] | None, Field(max_length=32, description="[{diff} or {patch}]")
    ] = None,
    budget: Annotated[dict[str, float | None] | None, Field(description="{trials: 40}")] = None,
    pin: Annotated[dict[str, Any] | None, Field(description="{param: value}")] = None,
) -> StudyReply:
    """Steer a study, no restart: a note, trials to run next, budget, pins (its starter or
    owner only)."""
    who = client.identity
    return _study_call(
        "steer_study",
        study,
        note=note,
        enqueue=enqueue,
        budget=budget,
        pin=pin,
        by=who.name if who is not None else None,
        admin=bool(who is not None and who.admin),
    )


def get_study(client: Client, study: StudyDir) -> StudyReply:
    """A study: state, best (and lowest_seen), running trials, recent decisions, budget
    left, steering."""
    return _study_call("get_study", study)


def wait_for_study(
    client: Client,
    study: StudyDir,
    timeout_s: Annotated[
        float, Field(ge=0, le=MAX_STUDY_WAIT_S, description="seconds to wait at most")
    ] = 60.0,
    since: Annotated[
        str | None, Field(max_length=100, description="the cursor its last reply gave")
    ] = None,
) -> StudyReply:
    """Wait until a trial ends or the study stops (up to timeout_s); since: only what
    changed since that reply's cursor."""
    # (The MCP server runs the async twin in mcp_server.waiting, which holds no thread.)
    first = now = study_look(study)
    seen = parse_cursor(since)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not study_moved(first, now, seen):
        time.sleep(min(STUDY_POLL_S, max(0.0, deadline - time.monotonic())))
        now = study_look(study)
    return study_waited(first, now, seen)


def study_look(study: str) -> StudyReply:
    """One look at a study (get_study's state): what a wait compares."""
    return _study_call("get_study", study)


def study_moved(first: StudyReply, now: StudyReply, seen: Cursor | None = None) -> bool:
    """Whether a trial has ended since ``first`` (or since the cursor ``seen``), or the study
    is not running (any more)."""
    ended = seen.ended if seen is not None else _ended(first)
    return _ended(now) != ended or getattr(now, "state", None) != "running"


def study_waited(first: StudyReply, now: StudyReply, seen: Cursor | None = None) -> StudyReply:
    """The wait's reply: ``now``, with ``changed`` saying whether the wait was over and the
    ``cursor`` of what it showed; with ``seen`` (a cursor), only what changed since it."""
    view = now.model_dump()
    moved = study_moved(first, now, seen)
    cursor = make_cursor(view)
    if seen is None:
        return StudyReply.model_validate({**view, "changed": moved, "cursor": str(cursor)})
    return StudyReply.model_validate(delta(view, seen, cursor, moved))


@dataclass(frozen=True)
class Cursor:
    """What a wait_for_study reply showed: trials ended, the best trial, the budget's digest.
    The client holds it (the server keeps nothing: several agents and reconnects work)."""

    ended: int
    best: int | None
    budget: str

    def __str__(self) -> str:
        return f"c1.{self.ended}.{'-' if self.best is None else self.best}.{self.budget}"


def make_cursor(view: dict[str, Any]) -> Cursor:
    best = (view.get("best") or {}).get("trial")
    spent = json.dumps(view.get("budget"), sort_keys=True, default=str)
    return Cursor(_ended_of(view), best, hashlib.sha256(spent.encode()).hexdigest()[:8])


def parse_cursor(text: str | None) -> Cursor | None:
    if text is None:
        return None
    parts = text.split(".")
    if len(parts) != 4 or parts[0] != "c1" or not parts[1].isdigit():
        raise InvalidInput(
            f"bad cursor {text[:100]!r}: not one wait_for_study gave",
            hint="pass the cursor of the previous wait_for_study reply as it is, or none",
        )
    best = None if parts[2] == "-" else int(parts[2]) if parts[2].isdigit() else None
    return Cursor(int(parts[1]), best, parts[3])


def delta(view: dict[str, Any], seen: Cursor, cursor: Cursor, moved: bool) -> dict[str, Any]:
    """A study's view cut to what changed since ``seen``: the trials ended since (the newest
    five of them; get_study has all), the best when it changed, the budget when it moved."""
    new = cursor.ended - seen.ended
    out: dict[str, Any] = {
        "name": view.get("name"),
        "state": view.get("state"),
        "changed": moved,
        "cursor": str(cursor),
        "trials": view.get("trials"),
        "ended_since": max(0, new),
        "recent": (view.get("recent") or [])[-min(max(new, 0), 5) :] if new > 0 else [],
    }
    if cursor.best != seen.best:
        out["best"] = view.get("best")
        out["lowest_seen"] = view.get("lowest_seen")
    if cursor.budget != seen.budget:
        out["budget"] = view.get("budget")
    for key in ("stop_reason", "stop_detail", "hint", "last_error", "report"):
        if view.get(key):
            out[key] = view[key]
    if view.get("warnings") and moved:
        out["warnings"] = view["warnings"]
    return out


def _ended(state: StudyReply) -> int:
    """How many of the study's trials have ended."""
    return _ended_of({"trials": getattr(state, "trials", None)})


def _ended_of(view: dict[str, Any]) -> int:
    trials = view.get("trials") or {}
    return (
        int(trials.get("total", 0)) - int(trials.get("running", 0)) - int(trials.get("proposed", 0))
    )


def suggest_trials(
    client: Client,
    study: StudyDir,
    n: Annotated[int, Field(ge=1, le=32, description="how many trials to propose")] = 1,
    prior_jobs: PriorJobs = None,
) -> StudyReply:
    """The proposer's next n trials (config diffs or patches, with why), not run: launch
    those you like. Spends llm_usd; trials handed out are claimed a while (not given twice)."""
    extra = {"prior_jobs": list(prior_jobs)} if prior_jobs else {}
    return _study_call(
        "suggest_trials", study, n=n, claimed_by=client.launcher(), home=str(client.home), **extra
    )


def stop_study(
    client: Client,
    study: StudyDir,
    reason: Annotated[str | None, Field(max_length=500, description="why, for the record")] = None,
    cancel_running: Annotated[bool, Field(description="also cancel its running trials")] = True,
) -> StudyReply:
    """Stop a study (and its running trials); its journal is kept for a resume."""
    kwargs: dict[str, Any] = {"cancel_running": cancel_running}
    if reason and "reason" in inspect.signature(_study_api().stop_study).parameters:
        kwargs["reason"] = reason
    elif reason:  # this autoresearch version journals no reason: the server's log keeps it
        log.info("stop_study %s: %s", study, reason)
    return _study_call("stop_study", study, **kwargs)
