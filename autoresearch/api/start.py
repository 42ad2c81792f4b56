"""start_study: a study's loop started in the background (or run here), and its refusals."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidInput, InvalidState
from autoresearch.api.hosted import hand_to_host, not_hosted, running_host
from autoresearch.api.reading import get_study
from autoresearch.journal.journal import Journal
from autoresearch.study.folder import (
    LOOP_LOG,
    fill_env,
    hidden_copy,
    loop_alive,
    private_dir,
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

    In the background (default) the loop runs as a thread of the home's study host where one
    runs (``autoresearch host run``; not for ``resume``, nor with ``AIR_STUDY_HOST=off``: the
    reply's ``hosted_by`` names it), else as its own process; either logs to
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
    # a resumed study runs as a process of its own: the host leaves a study that stopped
    # stopped, and may hold its name; prior jobs and a base job travel to a host as to a
    # process (the journal, and .start.yaml's base_job and base_config)
    hostable = background and not resume
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
    notes = [proposer.unavailable] if getattr(proposer, "unavailable", None) else []
    host = running_host() if hostable else None
    if host is not None:  # a thread of the home's study host, not a process (AIR_STUDY_HOST)
        hosted = hand_to_host(
            host, launch_file, folder, resume=resume, made=made, timeout_s=START_TIMEOUT_S
        )
        if isinstance(hosted, dict):
            hosted["warnings"] = [*notes, *hosted.get("warnings", [])]
            return hosted
        notes.append(not_hosted(hosted))
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
    if notes:  # its fallback proposes, the host refused it: say why, first
        out["warnings"] = [*notes, *out.get("warnings", [])]
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
