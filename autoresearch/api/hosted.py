"""start_study's hand-over to the home's study host (``autoresearch host run``): a study
started in the background becomes a thread of the running host, not a process of its own
(about 1 MB instead of about 30 MB PSS), unless ``AIR_STUDY_HOST=off``."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import AirError, InvalidSpec
from autoresearch.api.reading import get_study
from autoresearch.journal.journal import Journal
from autoresearch.study.host_folder import FAILED_SUFFIX, add_specs, host_alive, host_dir, take_back


def running_host() -> dict[str, Any] | None:
    """The home's running study host (its pid and folder), or None: none runs, or
    ``AIR_STUDY_HOST=off`` asks for a process of its own per study."""
    if settings.get("AIR_STUDY_HOST") == "off":
        return None
    folder = host_dir()
    info = host_alive(folder)
    return {"pid": info.get("pid"), "host_dir": str(folder)} if info else None


def hand_to_host(
    host: dict[str, Any],
    launch_file: Path,
    folder: Path,
    *,
    resume: bool,
    made: bool,
    timeout_s: float,
) -> dict[str, Any] | str:
    """Add the study (``launch_file``, its study folder ``folder``) to the host as
    ``autoresearch host add`` does, and wait until the host's thread has started its loop:
    get_study's view with ``hosted_by``. Returns a string (why) when the host refuses it, a
    name it holds already: the caller then starts a process of its own. A study refused
    before its first trial ran raises its error, with the spec and the folder this call made
    taken back, as a process of its own does."""
    try:
        added = add_specs(Path(host["host_dir"]), [launch_file], folder, resume)
    except InvalidSpec as exc:
        return "; ".join(exc.context.get("problems") or [exc.message])
    spec = Path(added[0]["spec"])
    failed = spec.with_name(spec.stem + FAILED_SUFFIX)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if failed.exists():  # the host could not start it (its loop refused at once)
            why = _read(failed)
            _take_back(spec, folder, made)
            raise AirError(
                str(why.get("message") or "the study host could not start the study"),
                code=str(why.get("code") or "invalid-state"),
                hint=f"{why.get('hint') or 'fix the cause'}; then start it again",
                study_dir=str(folder),
            )
        events = Journal(folder).read()
        if any(e.get("event") == "session_started" for e in events):
            break
        if not host_alive(Path(host["host_dir"])):
            return _queued(host, spec, folder, "the host stopped before it took the study")
        time.sleep(0.05)
    else:
        return _queued(host, spec, folder, f"the host had not started it within {timeout_s:g} s")
    _refused_at_start(spec, folder, made, deadline)
    out = get_study(folder)
    out["hosted_by"] = host
    return out


def _refused_at_start(spec: Path, folder: Path, made: bool, deadline: float) -> None:
    """A new study refused before its first trial ran (see start.py's twin for a process)
    ends its hosted loop at once: its error is raised here and the host's spec and the folder
    this call made are taken back, so that a rerun after the fix is refused by neither."""
    error = None
    failed = spec.with_name(spec.stem + FAILED_SUFFIX)
    while time.monotonic() < deadline:
        events = Journal(folder).read()
        if any(e.get("event") in ("launched", "launch_refused") for e in events):
            return
        error = next((e for e in reversed(events) if e.get("event") == "error"), None)
        if error is None and any(e.get("event") == "stopped" for e in events):
            return  # stopped (a stop request) before a trial: it stays, as for a process
        if error is not None and failed.exists():
            break  # the host's thread ended the study and is done with its folder
        time.sleep(0.05)
    else:
        return
    if any(e.get("event") == "launched" for e in Journal(folder).read()):
        return
    _take_back(spec, folder, made)
    raise AirError(
        str(error.get("message") or "the study was refused"),
        code=str(error.get("code") or "air-error"),
        hint=f"{error.get('hint') or 'fix the cause'}; then start it again (nothing ran: its"
        " spec was taken back from the study host" + (", its folder removed)" if made else ")"),
        study_dir=str(folder),
    )


def _take_back(spec: Path, folder: Path, made: bool) -> None:
    take_back(spec)
    if made:
        shutil.rmtree(folder, ignore_errors=True)


def _queued(host: dict[str, Any], spec: Path, folder: Path, why: str) -> dict[str, Any]:
    """The study waits in the host's specs: the running host, or the next ``autoresearch
    host run``, starts it."""
    if Journal(folder).exists():
        out = get_study(folder)
    else:
        out = {"name": spec.stem, "study_dir": str(folder), "state": "queued", "pid": None}
    out["hosted_by"] = host
    note = (
        f"queued to the study host ({host['host_dir']}, pid {host['pid']}): {why}; it starts"
        " when the host takes it (`autoresearch host ls`, or get_study, say when)"
    )
    out["warnings"] = [note, *out.get("warnings", [])]
    return out


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def not_hosted(why: str) -> str:
    """The warning of a study the host refused, started as a process of its own."""
    return f"the study host refused it ({why}): it runs as a process of its own"


__all__ = ["hand_to_host", "not_hosted", "running_host"]
