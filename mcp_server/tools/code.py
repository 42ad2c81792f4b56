"""export_code: a job's or a study's best code as a clean diff, or a commit on a new branch."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from air_skills.client import Client
from air_skills.errors import InvalidInput, InvalidState
from mcp_server.schemas import ExportReply
from mcp_server.tools.studies import StudyDir

MAX_DIFF_CHARS = 60_000
# A study folder's own files: never part of exported code (older snapshots may hold them).
_STUDY_FILES = re.compile(r"(^|/)(journal\.jsonl|loop\.json|loop\.log|\.loop\.lock|\.start\.yaml)$")


def export_code(
    client: Client,
    job_id: Annotated[str | None, Field(max_length=200, description="a job")] = None,
    study: Annotated[StudyDir | None, Field(description="or a study: its best trial")] = None,
    branch: Annotated[
        str | None, Field(max_length=200, description="commit it on this new branch instead")
    ] = None,
) -> ExportReply:
    """A job's or a study's best code as a clean diff against its base commit; with branch, a
    commit on a new branch (your tree untouched)."""
    if (job_id is None) == (study is None):
        raise InvalidInput("give job_id or study", hint="e.g. export_code(job_id='job-...')")
    trial = None
    if study is not None:
        job_id, trial, made = _study_best(study, branch)
        if made is not None:
            return ExportReply(trial=trial, **made)
    assert job_id is not None
    if branch is not None:
        made = client.code.export(job_id, branch=branch)["branch"]
        return ExportReply(job_id=made["job_id"], trial=trial, branch=branch, commit=made["commit"])
    diff = clean_diff(client.code.patch(job_id))
    cut = len(diff) > MAX_DIFF_CHARS
    more = f"\n(cut: the rest in resource air://jobs/{job_id}/code.patch)" if cut else ""
    return ExportReply(job_id=job_id, trial=trial, diff=diff[:MAX_DIFF_CHARS] + more)


def _study_best(study: str, branch: str | None) -> tuple[str | None, int, dict[str, Any] | None]:
    """(the best trial's job, its number, the export made when the study has a code base)."""
    from autoresearch.api import study_folder
    from autoresearch.report.export import export_study
    from autoresearch.report.report import load_state

    folder = study_folder(study)
    _, state = load_state(folder)
    number = state.best_trial
    if number is None:
        raise InvalidState("the study has no best trial yet", hint="wait_for_study, then retry")
    if state.code_base is not None and branch is not None:  # its code and config, committed
        made = export_study(folder, branch)
        keep = ("branch", "commit")
        return None, number, {"job_id": state.trials[number].job_id, **{k: made[k] for k in keep}}
    return state.trials[number].job_id, number, None


def clean_diff(patch: str) -> str:
    """``patch`` without the sections of a study's own files (journal, loop files)."""
    parts = re.split(r"(?m)^(?=--- (?:a/|/dev/null))", patch)
    return "".join(p for p in parts if not _study_section(p))


def _study_section(part: str) -> bool:
    head = part.split("\n", 2)[:2]
    if len(head) < 2 or not head[0].startswith("--- ") or not head[1].startswith("+++ "):
        return False
    return any(_STUDY_FILES.search(line[4:].strip()) for line in head)
