"""``autoresearch export``: a study's winning code and config as a commit on a new branch of
the user's repository (the current branch and the working tree are never touched), through
the runtime's git plumbing (``runtime/code_export``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidInput, InvalidState
from air_skills.runtime.code.code_export import export_branch
from air_skills.runtime.code.code_source import JobCode
from autoresearch.code.code_base import CodeBase
from autoresearch.code.code_check import chain_of
from autoresearch.journal.journal import TrialStatus
from autoresearch.report.report import load_state

CONFIG_FILE = "autoresearch-config.json"


def export_study(
    study_dir: Path, branch: str, trial: int | None = None, home: Path | None = None
) -> dict[str, Any]:
    """Commit trial ``trial``'s code (default: the best) with its config in ``CONFIG_FILE``
    on the new branch ``branch``; returns what was made."""
    study, state = load_state(study_dir)
    done = state.final_done or {}
    # the default: the final re-evaluation's winner, when it made one; else the kept best
    number = (done.get("winner") or state.best_trial) if trial is None else trial
    t = state.trials.get(number) if number is not None else None
    if t is None:
        raise InvalidInput(
            f"no trial {trial} in {study_dir}" if trial is not None else "no best trial yet",
            hint="give --trial N of a trial that succeeded (see `autoresearch status`)",
        )
    if t.status != TrialStatus.SUCCEEDED or t.failure_kind == "tampered":
        raise InvalidState(f"trial {number} did not succeed ({t.status.value}): not exported",
                           hint="export the best trial, or another that succeeded")  # fmt: skip
    if state.code_base is None:
        raise InvalidState(
            f"study {study.name} has no code section: there is no code to export",
            hint="its best config is in the report; export a job's code with `air code export`",
        )
    if home is None:
        from air_skills.home import default_home

        home = default_home()
    base = CodeBase(home, state.code_base)
    overrides, patch = base.over_snapshot(chain_of(state.trials, number))
    overrides[CONFIG_FILE] = (json.dumps(t.config, indent=2, sort_keys=True) + "\n").encode()
    record = {**state.code_base, "source": state.code_base.get("mode")}
    code = JobCode(home, f"{study.name}-t{number}", base.digest, base.manifest, record,
                   patch, overrides)  # fmt: skip
    value = t.confirmed["mean"] if t.confirmed and t.confirmed.get("n") else t.value
    message = (
        f"autoresearch: study {study.name}, trial {number}: {study.objective.metric} = {value:.6g}"
        f" ({study.objective.direction})\n\nstudy folder: {Path(study_dir).resolve()}\n"
        f"study id: {state.study_id}\nbase snapshot: {base.digest}\n"
        f"lineage: {' -> '.join(str(n) for n in _lineage(state.trials, number))}\n"
        f"config: {CONFIG_FILE}\n"
    )
    if done.get("winner") == number and done.get("verdict"):  # what held on unseen data
        message += f"final re-evaluation (winner vs baseline): {done['verdict']}\n"
    elif done.get("winner") is not None:
        message += f"not the final re-evaluation's winner (trial {done['winner']})\n"
    out = export_branch(code, branch, Path(base.record["root"]), message)
    return {**out, "study": study.name, "trial": number, "value": value}


def _lineage(trials: dict[int, Any], number: int) -> list[int]:
    out = []
    while number is not None and number not in out:
        out.append(number)
        number = trials[number].parent if number in trials else None
    return ["base", *out[::-1]]  # type: ignore[list-item]
