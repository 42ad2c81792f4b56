"""Journal events never take a trial back in its life (issue 30): a `launched` line appended
for a finished, decided trial made a resume re-finish it with another trial's value."""

from __future__ import annotations

from pathlib import Path

import pytest
from ar_helpers import small_study

from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import StudyLoop
from autoresearch.study.study import check_runnable, parse_study

STUDY = parse_study(small_study(name="order", budget={"trials": 3, "concurrency": 1}))
FINISHED = {"status": "SUCCEEDED", "value": 0.5, "metrics": {"loss": 0.5}, "gpu_s": 0.0}


def decided(folder: Path) -> Journal:
    """Trial 0 finished and decided; trial 1 pruned (its job still stopping)."""
    folder.mkdir()
    j = Journal(folder)
    j.append("session_started", study=STUDY.to_dict(), study_id="s1", gpus_per_trial=0)
    for n in (0, 1):
        j.append("proposal", trial=n, source="random", diff={}, config={})
        j.append("launched", trial=n, job_id=f"job-{n}", attempt=1, gpus=0)
    j.append("finished", trial=0, **FINISHED)
    j.append("decision", trial=0, decision="baseline", value=0.5, best_value=0.5)
    j.append("pruned", trial=1, value=0.9, step=2, reason="median")
    return j


LATE = [
    ("launched", {"job_id": "job-9", "attempt": 2}, 0, "launched: trial 0 was already decided"),
    ("finished", FINISHED, 0, "finished: trial 0 was already decided"),
    ("decision", {"decision": "keep", "best_value": 0.1}, 0, "trial 0 was already decided"),
    ("infra_retry", {"gpu_s": 1.0}, 0, "infra_retry: trial 0 was already decided"),
    ("launched", {"job_id": "job-9", "attempt": 2}, 1, "launched: trial 1 has already ended"),
    ("pruned", {"value": 0.1}, 1, "pruned: trial 1 has already ended"),
]


@pytest.mark.parametrize(("kind", "fields", "trial", "reason"), LATE, ids=[x[3] for x in LATE])
def test_an_event_that_goes_back_in_a_trials_life_is_skipped(
    tmp_path: Path, kind: str, fields: dict, trial: int, reason: str
) -> None:
    j = decided(tmp_path / "s")
    before = replay(j.read()).trials[trial].to_dict()
    j.append(kind, trial=trial, **fields)
    st = replay(j.read())
    assert st.trials[trial].to_dict() == before and st.best_value == 0.5
    assert reason in (j.skipped_warning(st) or ""), j.skipped_warning(st)


def test_a_pruned_trials_job_still_ends_and_is_decided_once(tmp_path: Path) -> None:
    j = decided(tmp_path / "s")
    j.append("finished", trial=1, status="PRUNED", value=0.9, gpu_s=2.0)
    j.append("decision", trial=1, decision="pruned")
    j.append("finished", trial=1, status="SUCCEEDED", value=0.01, gpu_s=5.0)  # once only
    st = replay(j.read())
    t1 = st.trials[1]
    assert t1.status == TrialStatus.PRUNED and t1.job_done and t1.gpu_s == 2.0
    assert "finished: trial 1 was already decided" in (j.skipped_warning(st) or "")


def test_a_resume_never_refinishes_a_decided_trial(study_home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "study"
    study = check_runnable(STUDY)
    StudyLoop(study, folder, poll_s=0.2).run()
    first = replay(Journal(folder).read())
    assert [t.status for t in first.ordered()] == [TrialStatus.SUCCEEDED] * 3
    # the attack: trial 1 "launched" again, as the job of trial 2 (finished, another value)
    Journal(folder).append("launched", trial=1, job_id=first.trials[2].job_id, attempt=2, gpus=0)
    StudyLoop(study, folder, poll_s=0.2, resume=True).run()
    events = Journal(folder).read()
    after = replay(events)
    assert after.trials[1].value == first.trials[1].value
    assert after.trials[1].job_id == first.trials[1].job_id
    decisions = [e["trial"] for e in events if e["event"] == "decision"]
    assert sorted(decisions) == [0, 1, 2]  # one each: none re-decided
    assert sum(1 for e in events if e["event"] == "finished" and e["trial"] == 1) == 1
