"""Plain functions over studies, for the CLI and the MCP server (which only registers them).

``start_study`` starts a loop (in the background by default), ``get_study`` reads a compact
state, ``suggest_trials`` returns the proposer's next diffs without running them, and
``stop_study`` stops a loop (and its running trials). Each returns a JSON-able dict.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import AirError, InvalidInput, InvalidState, NotFound
from autoresearch.journal.journal import Journal, StudyState
from autoresearch.report.report import load_state
from autoresearch.report.summary import summarize
from autoresearch.study.folder import (
    LOOP_LOG,
    STUDY_FILE,
    LoopLock,
    fill_env,
    hidden_copy,
    loop_alive,
    private_dir,
    request_stop,
    save_env,
    write_private,
)
from autoresearch.study.study import (
    Study,
    check_runnable,
    default_study_dir,
    dump_study,
    load_study,
)

START_TIMEOUT_S = 60.0


def _resolve_dir(study: Study, study_dir: str | Path | None) -> Path:
    return Path(study_dir).expanduser().resolve() if study_dir else default_study_dir(study)


def start_study(
    study: str | Path | dict[str, Any],
    study_dir: str | Path | None = None,
    *,
    resume: bool = False,
    background: bool = True,
    poll_s: float = 0.25,
    prior_jobs: list[str] | None = None,
    base_job: str | None = None,
) -> dict[str, Any]:
    """Start (or resume) a study from a study file, a study folder or an inline dict.

    In the background (default) the loop runs as its own process, logging to
    ``<study_dir>/loop.log``, and this returns as soon as it has started; otherwise it runs
    here until a budget is spent. Returns the study's state as ``get_study`` gives it.
    ``prior_jobs``: job ids already run by hand; they join a new study's history as trials
    (one that ran the base config is its baseline, not run again): autoresearch/loop/prior.py.
    ``base_job``: a job whose code (snapshot and patch) and config are the study's base.
    """
    source_dir = Path(study) if isinstance(study, str | Path) and Path(study).is_dir() else None
    if source_dir is not None and (alive := loop_alive(source_dir)):
        raise InvalidState(
            f"a loop is already running study folder {source_dir} (pid {alive.get('pid')})",
            hint="read it with get_study; stop it with stop_study",
            study_dir=str(source_dir),
        )
    parsed = load_study(study)
    if base_job:
        parsed = parsed.model_copy(update={"base_job": base_job})
    parsed = check_runnable(parsed)
    if parsed.base_job:  # checked now (an unknown job is refused here); the loop does it again
        from air_skills.client import Client
        from autoresearch.loop.prior import with_base_job

        parsed = with_base_job(parsed, Client())
    folder = Path(study_dir).expanduser().resolve() if study_dir else source_dir
    folder = folder.resolve() if folder else _resolve_dir(parsed, None)
    alive = loop_alive(folder)
    if alive:
        raise InvalidState(
            f"a loop is already running study folder {folder} (pid {alive.get('pid')})",
            hint="read it with get_study; stop it with stop_study",
            study_dir=str(folder),
        )
    if Journal(folder).exists() and not resume:
        raise InvalidState(
            f"study folder {folder} already holds a journal",
            hint="pass resume=true to continue it, or use another name or study_dir",
            study_dir=str(folder),
        )
    from autoresearch.study.registry import register

    made = not (resume or prior_jobs or folder.exists())  # a refused start takes it back
    register(parsed.name, folder)  # get_study(name) finds it, wherever the folder is
    if prior_jobs:
        resume = _journal_prior(folder, parsed, prior_jobs, resume)
    if not background:
        from autoresearch.loop.loop import StudyLoop

        StudyLoop(parsed, folder, resume=resume, poll_s=poll_s).run()
        return get_study(folder)
    from autoresearch.proposers import make_proposer

    proposer = make_proposer(parsed.proposer)  # a missing API key fails here (no fallback)
    private_dir(folder)  # owner-only, and the env values in env.json alone
    save_env(folder, fill_env(parsed, source_dir).env)
    launch_file = folder / ".start.yaml"
    write_private(launch_file, dump_study(hidden_copy(parsed)))
    cmd = [
        sys.executable,
        "-m",
        "autoresearch.cli",
        "run",
        str(launch_file),
        "--dir",
        str(folder),
        "--poll-s",
        str(poll_s),
    ]
    if resume:
        cmd.append("--resume")
    before = len(Journal(folder).read())
    with open(folder / LOOP_LOG, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (folder / LOOP_LOG).read_text(errors="replace").strip().splitlines()[-5:]
            hint = f"read {folder / LOOP_LOG}"
            if made and not any(e.get("event") == "launched" for e in Journal(folder).read()):
                shutil.rmtree(folder, ignore_errors=True)  # nothing ran: a rerun is not refused
                hint = f"fix the cause and start it again (study folder {folder} removed)"
            raise InvalidState(
                f"the study loop exited at once (code {proc.returncode}): " + " / ".join(tail),
                hint=hint,
                study_dir=str(folder),
            )
        events = Journal(folder).read()
        if any(e.get("event") == "session_started" for e in events[before:]):
            break
        time.sleep(0.05)
    else:
        raise InvalidState(
            f"the study loop (pid {proc.pid}) did not start within {START_TIMEOUT_S:g} s",
            hint=f"read {folder / LOOP_LOG}",
            study_dir=str(folder),
        )
    if made:
        _refused_at_start(proc, folder, deadline)
    out = get_study(folder)
    out["pid"] = proc.pid
    if getattr(proposer, "unavailable", None):  # its fallback proposes: say why, first
        out["warnings"] = [proposer.unavailable, *out.get("warnings", [])]
    return out


def _refused_at_start(proc: subprocess.Popen[bytes], folder: Path, deadline: float) -> None:
    """A new study refused before its first trial ran (the sandbox or the data roots refuse
    the baseline's launch, a held-out input is missing) ends its loop at once: its error is
    raised here, and the folder this call made is taken back, so the rerun after the fix is
    not refused as "already holds a journal". Returns once a trial is launched (or stopped)."""
    error = None
    while time.monotonic() < deadline:
        events = Journal(folder).read()
        if any(e.get("event") in ("launched", "launch_refused", "stopped") for e in events):
            return
        error = next((e for e in reversed(events) if e.get("event") == "error"), None)
        if error is not None or proc.poll() is not None:
            break
        time.sleep(0.05)
    else:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)  # it ends right after journaling its error
    events = Journal(folder).read()
    if proc.poll() is None or any(e.get("event") == "launched" for e in events):
        return  # still going, or a trial ran: the folder and its journal stay
    error = next((e for e in reversed(events) if e.get("event") == "error"), error)
    shutil.rmtree(folder, ignore_errors=True)
    removed = f"study folder {folder} removed: nothing ran"
    if error is not None:
        hint = str(error.get("hint") or "fix the cause")
        raise AirError(
            str(error.get("message") or "the study was refused"),
            code=str(error.get("code") or "air-error"),
            hint=f"{hint}; then start it again ({removed})",
            study_dir=str(folder),
        )
    raise InvalidState(
        f"the study loop exited at once (code {proc.returncode})",
        hint=f"fix the cause and start it again ({removed})",
        study_dir=str(folder),
    )


def _journal_prior(folder: Path, study: Study, prior_jobs: list[str], resume: bool) -> bool:
    """Journal the prior jobs as a new study's first trials; the loop then carries on from
    that journal (returns the ``resume`` to start it with)."""
    if resume:
        raise InvalidInput(
            "prior_jobs join a new study's history; a resumed study keeps its own",
            hint="start a new study with prior_jobs, or resume without them",
        )
    from air_skills.client import Client
    from autoresearch.loop.prior import journal_prior

    folder.mkdir(parents=True, exist_ok=True)
    journal_prior(folder, study, prior_jobs, Client())
    return True


def study_folder(study: str | Path) -> Path:
    """A study folder given as a path, or as a study's name: wherever this home ran it
    (autoresearch/study/registry.py), else AIR_HOME/studies/<name>, else ./studies/<name>."""
    from autoresearch.study.registry import find

    folder = Path(study).expanduser().resolve()
    if not folder.is_dir() and "/" not in str(study):
        return find(str(study)) or folder
    return folder


def get_study(study_dir: str | Path) -> dict[str, Any]:
    """A compact view of a study (a folder, or a name in ./studies): state, best, running
    trials, the recent trials' decisions, budget spent and left."""
    folder = study_folder(study_dir)
    study, state = load_state(folder)
    return summarize(folder, study, state)


def suggest_trials(
    study_dir_or_file: str | Path | dict[str, Any],
    n: int = 1,
    prior_jobs: list[str] | None = None,
    claimed_by: str | None = None,
    home: str | Path | None = None,
) -> dict[str, Any]:
    """The proposer's next ``n`` diffs for a study, without running them.

    With a study folder the proposer sees the study's whole history (and LLM costs are
    journaled against its budget); with a study file or dict it proposes from no history.
    ``prior_jobs`` (job ids run by hand) join that history, with their objectives.
    With ``claimed_by`` (who asks: air-mcp passes its caller), each proposal handed out is
    claimed in ``home``'s state database for AIR_CLAIM_S: another agent asking meanwhile gets
    other trials; ``board`` lists the study's claimed trials, who proposed each, and the job
    that ran it and who launched it.
    """
    from autoresearch.loop.loop import build_request
    from autoresearch.proposers import make_proposer, suggest

    if not isinstance(n, int) or not 1 <= n <= 64:
        raise InvalidInput(f"n must be an integer from 1 to 64, got {n!r}", hint="pass n=1..64")
    folder: Path | None = None
    if isinstance(study_dir_or_file, str | Path) and not Path(study_dir_or_file).exists():
        # a study's name, as the other study tools take it (issue 39.7)
        named = study_folder(study_dir_or_file)
        study_dir_or_file = named if named.is_dir() else study_dir_or_file
    if isinstance(study_dir_or_file, str | Path) and Path(study_dir_or_file).is_dir():
        folder = Path(study_dir_or_file).expanduser().resolve()
    if folder is not None and Journal(folder).exists():
        study, state = load_state(folder)
    else:
        source = study_dir_or_file
        if folder is not None:
            if not (folder / STUDY_FILE).exists():
                raise NotFound(f"no study in {folder}", hint="give a study folder or a study file")
            source = folder / STUDY_FILE
        study, state = load_study(source), StudyState()
    if prior_jobs:
        from air_skills.client import Client
        from autoresearch.loop.prior import with_prior

        state = with_prior(state, study, prior_jobs, Client())
    from autoresearch.study import claims

    store, key = None, claims.study_key(folder, study.name)
    if claimed_by is not None:
        from air_skills.client import Client

        store = Client(home).store
    # Ask for more than n when other agents hold claims: some proposals may be theirs.
    held = claims.live_claims(store.conn, key, str(claimed_by)) if store is not None else 0
    proposer = make_proposer(study.proposer)
    code = _code_base(study, state)
    asked = min(64, n + held)
    result = suggest(proposer, build_request(study, state, asked, purpose="suggest", code=code))
    skipped: list[str] = []
    if store is not None:
        result, skipped = _claimed(store, key, study, str(claimed_by), n, result)
        while len(result.proposals) < n and skipped and asked < 64 and not result.stop_reason:
            asked = min(64, 2 * asked + len(skipped))  # skipped ones: ask the proposer for more
            spent = result.events
            result = suggest(proposer, build_request(study, state, asked, "suggest", code=code))
            result.events = spent + result.events  # every LLM call is journaled
            result, skipped = _claimed(store, key, study, str(claimed_by), n, result)
    if folder is not None and Journal(folder).exists():
        journal = Journal(folder)
        for kind, fields in result.events:
            if kind == "llm_call":  # money spent is money spent, loop or not
                journal.append(kind, **fields)
    return {
        "study": study.name,
        "history": len(state.trials),
        "suggestions": [
            {
                "diff": p.diff,
                "config": study.config_for(p.diff),
                "rationale": p.rationale,
                "source": p.source,
                **(
                    {"patch": p.patch, "parent": p.parent, "patch_summary": p.patch_summary}
                    if p.patch or p.parent is not None
                    else {}
                ),
            }
            for p in result.proposals
        ],
        "stop_reason": result.stop_reason,
        "llm_usd": round(sum(f.get("usd", 0.0) for k, f in result.events if k == "llm_call"), 6),
        "notes": [
            f"{k}: {f.get('reason') or f.get('error') or '; '.join(f.get('problems', []))}"
            for k, f in result.events
            if k in ("fallback", "invalid_proposal") or (k == "llm_call" and not f.get("ok"))
        ]
        + [f"skipped a proposal {why}" for why in skipped],
        **(
            {"claimed_by": claimed_by, "board": claims.board(store.conn, key, study.command)}
            if store is not None
            else {}
        ),
    }


def _claimed(
    store: Any, key: str, study: Study, who: str, n: int, result: Any
) -> tuple[Any, list[str]]:
    """``result`` keeping the (at most ``n``) proposals claimed for ``who``; why others not."""
    from autoresearch.study import claims

    offered = [(claims.trial_key(study.config_for(p.diff), p.patch), p) for p in result.proposals]
    taken, skipped = claims.claim(
        store,
        key,
        [(k, study.config_for(p.diff)) for k, p in offered],
        who,
        float(settings.get("AIR_CLAIM_S")),
        n,
        claims.ran_configs(store.conn, study.command),
    )
    result.proposals = [offered[i][1] for i in taken]
    return result, skipped


def _code_base(study: Study, state: StudyState) -> Any:
    """The study's code base: the journaled one, or (no history yet) the tree as it is now."""
    if study.code is None:
        return None
    from air_skills.home import default_home
    from autoresearch.code.code_base import CodeBase

    home = default_home()
    if state.code_base is not None:
        return CodeBase(home, state.code_base)
    if study.base_job:  # the base job's code (its snapshot and patch), not the tree
        from air_skills.client import Client
        from autoresearch.code.code_base import base_job_code

        return CodeBase.take(home, study, base_job_code(Client(), study.base_job))
    return CodeBase.take(home, check_runnable(study))


def trial_patch(study_dir: str | Path, trial: int) -> str:
    """A trial's code as patches from the study's base (root first): the full text."""
    from autoresearch.code.code_check import chain_of

    _, state = load_state(study_folder(study_dir))
    if trial not in state.trials:
        raise NotFound(f"no trial {trial} in {study_dir}", hint="see get_study for the trials")
    return "\n".join(chain_of(state.trials, trial))


def stop_study(
    study_dir: str | Path,
    *,
    cancel_running: bool = True,
    timeout_s: float = 30.0,
    reason: str | None = None,
) -> dict[str, Any]:
    """Stop a study: ask its loop to stop (cancelling running trials unless told not to) and
    wait for it; with no loop running, cancel the study's running trials directly. ``reason``
    is journaled with the stop: ``get_study`` shows it as ``stop_detail``."""
    folder = study_folder(study_dir)
    study, state = load_state(folder)
    alive = loop_alive(folder)
    if alive:
        request_stop(folder, cancel_running, reason or "stop_study")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and loop_alive(folder):
            time.sleep(0.1)
        out = get_study(folder)
        if loop_alive(folder):
            out["hint"] = "the loop has not stopped yet: it finishes its current step; check again"
        return out
    cancelled: list[str] = []
    active = [t for t in state.ordered() if t.job_id and not t.job_done]
    if state.stopped and not active:
        out = get_study(folder)
        out["cancelled_jobs"] = cancelled
        return out  # already stopped: nothing to do
    if cancel_running:
        from air_skills.client import Client

        with LoopLock(folder):
            client = Client()
            for t in state.ordered():
                if t.job_id and not t.job_done:
                    try:
                        client.cancel(t.job_id, reason=reason or "stop_study", wait_s=0)
                        cancelled.append(t.job_id)
                    except AirError:
                        pass
            detail = f"{reason} (no loop was running)" if reason else "no loop was running"
            Journal(folder).append("stopped", reason="stop-request", detail=detail)
    out = get_study(folder)
    out["cancelled_jobs"] = cancelled
    return out


__all__ = [
    "get_study",
    "start_study",
    "stop_study",
    "suggest_trials",
    "summarize",
    "trial_patch",
]


def steer_study(
    study_dir: str | Path,
    *,
    note: str | None = None,
    enqueue: list[dict[str, Any]] | None = None,
    budget: dict[str, Any] | None = None,
    pin: dict[str, Any] | None = None,
    by: str | None = None,
    admin: bool = False,
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """Steer a study without a restart (issue 39.9): ``note`` (the proposer reads it from its
    next call), ``enqueue`` (configs ``{"diff": {...}}`` or patches ``{"patch": ..., "parent":
    N}`` run next, as Optuna's enqueue_trial), ``budget`` (new limits: trials, wall_time_min,
    gpu_hours, llm_usd, concurrency), ``pin`` ({param: value}; null unpins). Journaled as one
    ``steer`` event (by the running loop, else here), shown by get_study and the report, kept
    across a resume. ``by``: the caller's identity (None: the owner, the local user); only the
    identity that started the study, an admin or the owner may steer it."""
    from autoresearch.journal.steering import BUDGET_KEYS
    from autoresearch.study.steer_requests import request_steer, starter

    folder = study_folder(study_dir)
    study, state = load_state(folder)
    started = starter(folder)
    if by is not None and not admin and by != started:
        from air_skills.runtime.store.identities import Forbidden

        raise Forbidden(
            f"study {study.name} was started by {started or 'the local user'}, not {by}",
            hint="only the identity that started a study (or its owner) may steer it;"
            " ask them, or read it with get_study",
        )
    problems = []
    unknown = sorted(set(budget or {}) - set(BUDGET_KEYS))
    if unknown:
        problems.append(f"budget key(s) {', '.join(unknown)}: use {', '.join(BUDGET_KEYS)}")
    for key, value in (budget or {}).items():
        if key in BUDGET_KEYS and value is not None and not isinstance(value, int | float):
            problems.append(f"budget {key}={value!r}: a number (or null: no limit)")
    space = set(study.search_space)
    bad_pins = sorted(set(pin or {}) - space - set(study.base_config))
    if bad_pins:
        problems.append(f"pin {', '.join(bad_pins)}: not a parameter of the study")
    items = []
    for n, item in enumerate(enqueue or []):
        if not isinstance(item, dict) or not ({"diff", "config", "patch"} & set(item)):
            problems.append(f"enqueue item {n}: give {{diff: {{...}}}} and/or {{patch: ...}}")
            continue
        items.append(
            {k: item[k] for k in ("diff", "config", "patch", "parent", "note") if k in item}
        )
    if not (note or items or budget or pin) and not problems:
        problems.append("nothing to do: give a note, enqueue, budget or pin")
    if problems:
        raise InvalidInput(
            "steer_study refused, nothing was changed: " + "; ".join(problems),
            hint="fix what is named and call again",
        )
    request: dict[str, Any] = {"by": by}
    for key, value in (("note", note), ("enqueue", items), ("budget", budget), ("pin", pin)):
        if value:
            request[key] = value
    handed = bool(loop_alive(folder))
    if not handed:
        try:
            with LoopLock(folder):  # no loop: journaled here, applied on a resume
                Journal(folder).append("steer", **request)
        except InvalidState:  # a loop took the folder meanwhile: it takes the request
            handed = True
    if handed:
        request_steer(folder, request)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any((folder / "steer").glob("*.json")):
            time.sleep(0.1)  # until the loop has taken (and journaled) it
    out = get_study(folder)
    out["steered"] = state.steering.line(request)
    return out
