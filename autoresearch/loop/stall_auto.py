"""A trial's stall settings from the study's ``stall`` key; ``auto`` learns from the finished
trials' longest quiet gaps, which their supervisors kept in each job's progress.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from air_skills.errors import AirError
from autoresearch.journal.journal import StudyState, TrialStatus
from autoresearch.spec.safe_read import read_regular
from autoresearch.spec.study_schema import Study

_GAPS: dict[tuple[str, str], float | None] = {}  # (home, job id) -> its longest gap, seconds


def job_gap_s(home: Path, job_id: str) -> float | None:
    """A finished job's longest quiet gap (its supervisor's progress.json), read once."""
    key = (str(home), job_id)
    if key not in _GAPS:
        try:
            raw = read_regular(home / "jobs" / job_id / "progress.json", "progress file",
                               max_bytes=4096)  # fmt: skip
            gap = json.loads(raw).get("max_gap_s")
            _GAPS[key] = float(gap) if isinstance(gap, int | float) and gap >= 0 else None
        except (AirError, ValueError, AttributeError):
            _GAPS[key] = None
    return _GAPS[key]


def trial_stall(study: Study, state: StudyState, home: Path) -> dict[str, Any]:
    """The JobSpec fields (``stall_timeout_min``, ``on_stall``) of the study's next trial."""
    rule = study.stall
    if rule is None:
        return {}
    out: dict[str, Any] = {"on_stall": rule.on_stall} if rule.on_stall else {}
    gaps = []
    if rule.timeout_min == "auto":
        for t in state.ordered():
            if t.status == TrialStatus.SUCCEEDED and t.job_id:
                gap = job_gap_s(home, t.job_id)
                if gap is not None:
                    gaps.append(gap)
    minutes = rule.timeout_for(gaps)
    if minutes is not None:
        out["stall_timeout_min"] = round(minutes, 4)
    return out
