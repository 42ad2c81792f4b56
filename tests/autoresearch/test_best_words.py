"""39.5: one "best": the kept best and the lowest single value seen are named apart, and TPE's
notes name the trial whose region each proposal lies in, by what it is to the study."""

from __future__ import annotations

import math
import random
from typing import Any

from ar_helpers import small_study

from autoresearch.journal.best import lowest_seen, role
from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.proposers import ProposalRequest, TpeProposer, suggest
from autoresearch.study.study import parse_study

SPACE = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}}


def _trial(study: Any, n: int, lr: float, value: float, decision: str, **kw: Any) -> Trial:
    diff = {"lr": lr}
    return Trial(number=n, diff=diff, config=study.config_for(diff), source="tpe",
                 status=TrialStatus.SUCCEEDED, value=value, decision=decision, **kw)  # fmt: skip


def test_the_lowest_single_value_is_lowest_seen_with_why_it_was_not_kept() -> None:
    study = parse_study(small_study(search_space=SPACE))
    trials = [
        _trial(study, 0, 1e-3, 0.441, "keep"),  # the kept best (a mean of its repeats)
        _trial(study, 23, 3e-2, 0.376, "discard"),  # lower, but within the noise floor
        _trial(study, 24, 1e-4, 0.9, "discard"),
    ]
    low = lowest_seen(trials, kept=0)
    assert low is not None and low["trial"] == 23 and low["value"] == 0.376
    assert "within the noise floor" in low["why_not_kept"]
    assert lowest_seen(trials[:1], kept=0) is None  # the kept best is the lowest: nothing to say
    assert role(trials[0], 0, trials[1]) == "the kept best"
    assert role(trials[1], 0, trials[1]).startswith("lowest_seen, within the noise floor")


def test_tpe_names_the_trial_whose_region_each_proposal_lies_in() -> None:
    study = parse_study(small_study(search_space=SPACE))
    rng = random.Random(3)
    trials = [_trial(study, 0, 1e-3, 0.441, "keep")]
    for n in range(1, 20):
        lr = 10 ** rng.uniform(-4, -1)
        trials.append(_trial(study, n, lr, 0.3 + abs(lr - 3e-2), "discard"))
    request = ProposalRequest(study=study, trials=tuple(trials), n=4, best_trial=0)
    result = suggest(TpeProposer(seed=0), request)
    assert result.proposals
    for p in result.proposals:
        assert "best so far" not in p.rationale
        named = int(p.rationale.split("region of trial ")[1].split(" ")[0])
        nearest = min(trials, key=lambda t: abs(math.log(t.diff["lr"] / p.diff["lr"])))
        assert named == nearest.number, p.rationale
        assert ("(the kept best;" in p.rationale) == (named == 0)


def test_suggest_trials_takes_a_study_name_as_the_other_study_tools_do(
    study_home: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """39.7: suggest_trials refused the study's name that get_study and the others take."""
    import yaml

    from autoresearch.api import suggest_trials

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "studies" / "named"
    folder.mkdir(parents=True)
    (folder / "study.yaml").write_text(
        yaml.safe_dump(small_study(name="named", search_space=SPACE))
    )
    out = suggest_trials("named", n=2)
    assert len(out["suggestions"]) == 2 and out["study"] == "named"


def test_prior_jobs_do_not_spend_the_trials_budget() -> None:
    """39.7: 27 prior jobs once spent a 12-trial budget before the study ran a trial."""
    from autoresearch.journal.journal import StudyState

    study = parse_study(small_study(search_space=SPACE))
    state = StudyState()
    for n in range(27):
        state.trials[n] = _trial(study, n, 1e-3, 0.5, "discard",
                                 rationale=f"a prior job, run by hand: job-{n}")  # fmt: skip
    state.trials[27] = _trial(study, 27, 1e-2, 0.4, "keep")
    assert state.search_trials == 1


def test_a_spent_trials_budget_is_said() -> None:
    """39.7: a budget already spent (a resume, a lowered budget) is a warning, not a silence."""
    from autoresearch.journal.journal import StudyState
    from autoresearch.report.summary import spent_warning

    study = parse_study(small_study(search_space=SPACE))
    state = StudyState()
    state.trials[0] = _trial(study, 0, 1e-3, 0.5, "keep")
    assert spent_warning(2, state) == [] and spent_warning(None, state) == []
    (said,) = spent_warning(1, state)
    assert "budget.trials is spent (1 of 1)" in said and "steer_study" in said


def test_a_baseline_on_another_class_than_the_trials_is_said_at_start(air_home: Any) -> None:
    """39.6: a study whose baseline and trials land on different classes warns at start."""
    from autoresearch.journal.journal import StudyState
    from autoresearch.report.summary import class_warning

    state = StudyState()
    state.trials[0] = Trial(number=0, diff={}, config={}, source="baseline",
                            status=TrialStatus.SUCCEEDED, value=0.4, job_id="job-a", gpus=1,
                            gpu_type="NVIDIA H100 80GB HBM3")  # fmt: skip
    on_cpu = parse_study(small_study(gpus_per_trial=0))
    (said,) = class_warning(on_cpu, state)
    assert "ran on H100 80GB" in said and "gpus_per_trial=0 run on CPU" in said
    # simulated GPUs and a CPU-slot baseline: one class, nothing to say
    state.trials[0].gpu_type, state.trials[0].gpus = None, 0
    assert class_warning(parse_study(small_study(gpus_per_trial=1)), state) == []
