"""What a host's studies are doing (``autoresearch host ls``) and stopping one of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, NotFound
from autoresearch.study.host_folder import (
    FAILED_SUFFIX,
    check_name,
    host_alive,
    host_dir,
    spec_files,
    study_dir_of,
)


def _hosted(folder: Path) -> list[tuple[str, Path, Path, Any]]:
    """(name, spec, study folder, study or error) of each spec in the host folder."""
    from autoresearch.study.study import load_study

    out = []
    for spec in spec_files(folder):
        try:
            study = load_study(spec)
        except AirError as exc:
            out.append((spec.stem, spec, spec, exc))
            continue
        failed = spec.with_name(spec.stem + FAILED_SUFFIX)
        why: Any = study
        if failed.exists():
            try:
                why = json.loads(failed.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                why = {"message": "could not start"}
        out.append((study.name, spec, study_dir_of(spec, study), why))
    return out


def host_status(given: str | Path | None = None) -> dict[str, Any]:
    """The host folder, whether its host runs, and each study's state from its own journal."""
    from autoresearch.api import get_study
    from autoresearch.journal.journal import Journal

    folder = host_dir(given)
    studies = []
    for name, spec, study_dir, study in _hosted(folder):
        row: dict[str, Any] = {"name": name, "spec": str(spec), "study_dir": str(study_dir)}
        if isinstance(study, AirError):
            row.update(state="failed", error=str(study))
        elif isinstance(study, dict):
            row.update(state="failed", error=study.get("message"))
        elif not Journal(study_dir).exists():
            row.update(state="waiting", trials_used=0, trials_limit=study.budget.trials)
        else:
            try:
                s = get_study(study_dir)
            except AirError as exc:
                row.update(state="unreadable", error=str(exc))
            else:
                trials = s["budget"]["trials"]
                row.update(
                    state=s["state"],
                    stop_reason=s.get("stop_reason"),
                    trials_used=trials.get("used"),
                    trials_limit=trials.get("limit"),
                    best=(s.get("best") or {}).get("value"),
                    error=(s.get("last_error") or {}).get("message"),
                )
        studies.append(row)
    return {"host_dir": str(folder), "host": host_alive(folder), "studies": studies}


def stop_hosted(
    given: str | Path | None, name: str, *, keep_running: bool = False, reason: str | None = None
) -> dict[str, Any]:
    """Stop study ``name`` of the host: its loop (a thread of the running host) is asked to
    stop as ``autoresearch stop`` asks any loop; the others go on."""
    from autoresearch.api import stop_study

    folder = host_dir(given)
    check_name(name)
    for hosted, _spec, study_dir, _study in _hosted(folder):
        if hosted == name:
            out = stop_study(study_dir, cancel_running=not keep_running, reason=reason)
            return out
    raise NotFound(
        f"host {folder} holds no study named {name!r}",
        hint="list its studies with `autoresearch host ls`",
    )
