"""Diff checks, the median rule, the journal and the price table: pure functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ar_helpers import small_study

from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.decisions import noise_stats
from autoresearch.loop.early_stopping import median_rule
from autoresearch.proposers.pricing import price_for
from autoresearch.spec.space import check_diff, config_key
from autoresearch.study.study import parse_study


@pytest.fixture
def study():
    data = small_study(
        search_space={
            "x": {"type": "float", "low": -1.0, "high": 1.0},
            "n": {"type": "int", "low": 1, "high": 4},
            "act": {"type": "choice", "values": ["relu", "gelu"]},
        },
        base_config={"x": 0.0, "n": 2, "act": "relu"},
    )
    return parse_study(data)


def test_valid_diff_is_normalized(study) -> None:
    diff, problems = check_diff(study, {"x": 1, "n": 3.0, "act": "gelu"}, {})
    assert problems == []
    assert diff == {"x": 1.0, "n": 3, "act": "gelu"}
    assert isinstance(diff["x"], float) and isinstance(diff["n"], int)


def test_every_problem_of_a_diff(study) -> None:
    diff, problems = check_diff(study, {"lr": 0.1, "x": 3.0, "n": 2.5, "act": "elu"}, {})
    assert diff is None
    text = " | ".join(problems)
    assert "unknown key 'lr'" in text and "x, n, act" in text
    assert "x=3.0 is out of range [-1.0, 1.0]" in text
    assert "n=2.5 has the wrong type" in text
    assert "act='elu' is not one of" in text


def test_wrong_types(study) -> None:
    _, problems = check_diff(study, {"x": "0.5", "n": True}, {})
    assert len(problems) == 2 and all("wrong type" in p for p in problems)
    _, problems = check_diff(study, ["x", 1], {})
    assert "must be an object" in problems[0]


def test_duplicates_name_what_they_repeat(study) -> None:
    taken = {config_key(study, study.config_for({"x": 0.5})): "trial 3"}
    _, problems = check_diff(study, {"x": 0.5}, taken)
    assert problems and "duplicate of trial 3" in problems[0]
    taken = {config_key(study, study.base_config): "trial 0"}
    _, problems = check_diff(study, {}, taken)
    assert "duplicate of trial 0" in problems[0]
    _, problems = check_diff(study, {"x": 0.0, "n": 2}, taken)  # the base, spelled out
    assert "duplicate of trial 0" in problems[0]


def test_median_rule() -> None:
    good = [[[0, 1.0], [1, 0.5], [2, 0.3]], [[0, 1.1], [1, 0.6], [2, 0.4]]]
    bad = [[0, 2.0], [1, 1.9]]
    v = median_rule(bad, good, direction="minimize", min_steps=1, min_trials=2)
    assert v.prune and v.step == 1 and v.median == pytest.approx(0.55)
    assert "worse than the median" in v.reason
    ok = [[0, 0.9], [1, 0.45]]
    assert not median_rule(ok, good, direction="minimize", min_steps=1, min_trials=2).prune
    # too early, or too few peers at that step
    assert not median_rule(bad, good, direction="minimize", min_steps=2, min_trials=2).prune
    assert not median_rule(bad, good[:1], direction="minimize", min_steps=0, min_trials=2).prune
    # maximize flips it
    assert median_rule(
        [[0, 0.1], [1, 0.2]], good, direction="maximize", min_steps=0, min_trials=2
    ).prune


def test_journal_survives_a_cut_line(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.append("session_started", study={"name": "x"}, study_id="abc")
    j.append("proposal", trial=0, source="baseline", diff={}, config={"x": 0})
    j.append("launched", trial=0, job_id="job-0000000000", attempt=1, gpus=1)
    with open(j.path, "a") as f:
        f.write('{"event": "finished", "trial": 0, "sta')  # kill -9 mid-write
    st = replay(j.read())
    assert st.trials[0].status == TrialStatus.RUNNING
    assert st.trials[0].job_id == "job-0000000000"
    j.append("finished", trial=0, status="SUCCEEDED", value=1.5, started_at=1.0, ended_at=2.0)
    st = replay(j.read())
    assert st.trials[0].status == TrialStatus.SUCCEEDED and st.trials[0].value == 1.5
    lines = j.path.read_text().splitlines()
    assert json.loads(lines[-1])["event"] == "finished"


def test_noise_stats() -> None:
    std, floor = noise_stats([1.0, 1.2, 1.1], 2.0)
    assert std == pytest.approx(0.1) and floor == pytest.approx(0.2)
    assert noise_stats([1.0], 2.0) == (0.0, 0.0)


def test_price_table() -> None:
    p = price_for("anthropic", "claude-sonnet-4-5-20250929")
    assert p.source == "table:claude-sonnet-4"
    assert p.usd(1_000_000, 1_000_000) == pytest.approx(18.0)
    assert price_for("openai", "gpt-4.1-mini").source == "table:gpt-4.1-mini"
    assert price_for("openai", "gpt-4.1-mini-2025").input_usd_per_mtok == 0.4
    unknown = price_for("openai", "my-model")
    assert unknown.source == "provider-max" and unknown.output_usd_per_mtok > 0
    assert price_for("openai", "my-model", base_url="http://127.0.0.1:8000/v1").usd(10**6, 0) == 0
    assert price_for("openai", "my-model", override=(1.0, 2.0)).usd(10**6, 10**6) == 3.0
