"""Controlling a study: stop_study (and its running trials), steer_study (notes, trials, budget)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidInput, InvalidState
from autoresearch.api.reading import get_study, study_folder
from autoresearch.journal.journal import Journal
from autoresearch.report.report import load_state
from autoresearch.study.folder import LoopLock, loop_alive, request_stop


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
