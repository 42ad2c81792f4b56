"""Reading studies: a study folder from a path or a name, its compact state, a trial's patches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from air_skills.errors import NotFound
from autoresearch.report.report import load_state
from autoresearch.report.summary import summarize


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


def trial_patch(study_dir: str | Path, trial: int) -> str:
    """A trial's code as patches from the study's base (root first): the full text."""
    from autoresearch.code.code_check import chain_of

    _, state = load_state(study_folder(study_dir))
    if trial not in state.trials:
        raise NotFound(f"no trial {trial} in {study_dir}", hint="see get_study for the trials")
    return "\n".join(chain_of(state.trials, trial))
