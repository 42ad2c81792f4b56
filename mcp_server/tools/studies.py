"""The study tools as plain functions over ``autoresearch.api``: no MCP in here.

``autoresearch`` is imported at call time, so the job tools work without it. Each function
takes the client first (as every tool does) and returns a ``StudyReply``.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
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
    Field(max_length=100, description="job ids run by hand: they join the history"),
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
            description="a study file or folder (a relative workdir starts there)",
        ),
    ] = None,
    study: Annotated[
        dict[str, Any] | None,
        Field(description="the study inline: a study file's keys"),
    ] = None,
    study_dir: Annotated[
        str | None,
        Field(max_length=4096, description="folder for its journal (default: studies/<name>)"),
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
    return _study_call("start_study", source, study_dir, resume=resume, **extra)


def get_study(client: Client, study: StudyDir) -> StudyReply:
    """A study: state, best trial and why, running trials' step, recent trials' decisions
    (keep, discard within the noise floor, pruned), budget left."""
    return _study_call("get_study", study)


def wait_for_study(
    client: Client,
    study: StudyDir,
    timeout_s: Annotated[
        float, Field(ge=0, le=MAX_STUDY_WAIT_S, description="seconds to wait at most")
    ] = 60.0,
) -> StudyReply:
    """Wait until a trial of the study ends or the study stops (up to timeout_s); returns
    get_study's state, with `changed` false on a timeout."""
    # (The MCP server runs the async twin in mcp_server.waiting, which holds no thread.)
    first = now = study_look(study)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not study_moved(first, now):
        time.sleep(min(STUDY_POLL_S, max(0.0, deadline - time.monotonic())))
        now = study_look(study)
    return study_waited(first, now)


def study_look(study: str) -> StudyReply:
    """One look at a study (get_study's state): what a wait compares."""
    return _study_call("get_study", study)


def study_moved(first: StudyReply, now: StudyReply) -> bool:
    """Whether a trial has ended since ``first``, or the study is not running (any more)."""
    return _ended(now) != _ended(first) or getattr(now, "state", None) != "running"


def study_waited(first: StudyReply, now: StudyReply) -> StudyReply:
    """The wait's reply: ``now``, with ``changed`` saying whether the wait was over."""
    return StudyReply.model_validate({**now.model_dump(), "changed": study_moved(first, now)})


def _ended(state: StudyReply) -> int:
    """How many of the study's trials have ended."""
    trials = getattr(state, "trials", None) or {}
    return (
        int(trials.get("total", 0)) - int(trials.get("running", 0)) - int(trials.get("proposed", 0))
    )


def suggest_trials(
    client: Client,
    study: Annotated[
        str,
        Field(
            max_length=4096,
            description="a study folder (its whole history is used) or a study file",
        ),
    ],
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
