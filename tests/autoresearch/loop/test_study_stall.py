"""A study with ``stall: auto``: the timeout learnt from finished trials stops a hung trial,
which is failed with what it was doing, and the loop goes on; the report counts it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ar_helpers import small_study

from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import run_study
from autoresearch.proposers import Proposal, ProposalRequest, ProposalResult, Proposer
from autoresearch.study.study import parse_study


class ScriptedProposer(Proposer):
    """Proposes a fixed list of diffs in order; where it is is read from the history."""

    name = "scripted"

    def __init__(self, diffs: list[dict[str, Any]]) -> None:
        self.diffs = diffs

    def propose(self, request: ProposalRequest) -> ProposalResult:
        used = sum(1 for t in request.trials if t.source == "scripted") + len(request.pending)
        todo = self.diffs[used : used + request.n]
        return ProposalResult([Proposal(d, "scripted", "scripted") for d in todo])


def test_stall_auto_fails_the_hung_third_trial_and_the_loop_goes_on(
    study_home: Path, tmp_path: Path
) -> None:
    study = parse_study(
        small_study(
            name="stall",
            base_config={"x": 0.0, "y": 0.0, "steps": 3, "sleep_s": 0.3, "hang_when_x": 0.5},
            budget={"trials": 4, "concurrency": 1},
            # Learnt from the first two trials (gaps of a second or so), floored at 6 s.
            stall={"timeout_min": "auto", "factor": 3, "floor_min": 0.1},
        )
    )
    folder = tmp_path / "study"
    # The baseline, then x=0.1, then x=0.5 (the third trial: it hangs), then x=0.2.
    proposer = ScriptedProposer([{"x": 0.1}, {"x": 0.5}, {"x": 0.2}])
    result = run_study(study, folder, poll_s=0.2, proposer=proposer)
    assert result.stop_reason == "budget:trials"
    state = replay(Journal(folder).read())
    statuses = [t.status for t in state.ordered()]
    assert statuses == [TrialStatus.SUCCEEDED] * 2 + [TrialStatus.FAILED, TrialStatus.SUCCEEDED], [
        (t.status, t.failure, t.job_id) for t in state.ordered()
    ]
    hung = state.ordered()[2]
    assert hung.failure and "reason: stalled" in hung.failure, hung.failure
    assert "trial_script.py" in hung.failure and "main()" in hung.failure  # where it hung
    # The third trial ran under the learnt timeout: the gaps of the first two times 3.
    gaps = [
        json.loads((study_home / "jobs" / t.job_id / "progress.json").read_text())["max_gap_s"]
        for t in state.ordered()[:2]
        if t.job_id
    ]
    from air_skills import Client

    spec = json.loads(Client(study_home).store.row(hung.job_id).spec)
    assert spec["stall_timeout_min"] == round(max(0.1, 3 * max(gaps) / 60), 4)
    assert "- **Stalled:** 1 (trials 2:" in (folder / "report.md").read_text()
