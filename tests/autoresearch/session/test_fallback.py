"""A named fallback proposes when the LLM proposer cannot (issue 24): no API key, and the
replies say why; without a fallback named, the missing key is still an error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from ar_helpers import small_study

from air_skills.errors import ProposerError
from autoresearch.api import get_study, start_study, suggest_trials
from autoresearch.journal.journal import Journal

LLM = {"type": "llm", "provider": "anthropic", "model": "claude-sonnet-4-5"}


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def test_a_study_without_a_key_runs_on_its_fallback_and_says_why(
    study_home: Path, tmp_path: Path, no_key: None
) -> None:
    study = small_study(name="fb", proposer={**LLM, "fallback": "tpe"})
    study["budget"] = {"trials": 3, "concurrency": 1}
    study["noise"] = {"repeats": 0}
    folder = tmp_path / "fb"
    started = start_study(study, str(folder))
    assert "cannot run" in started["warnings"][0] and "tpe proposes" in started["warnings"][0]
    deadline = time.monotonic() + 180
    while get_study(folder)["state"] == "running":
        assert time.monotonic() < deadline, "the study did not end"
        time.sleep(0.2)
    events = Journal(folder).read()
    sources = [e["source"] for e in events if e["event"] == "proposal" and e["trial"] > 0]
    assert sources and all(s.startswith("fallback:") for s in sources), sources
    reasons = [e["reason"] for e in events if e["event"] == "fallback"]
    assert reasons and "ANTHROPIC_API_KEY" in reasons[0]
    assert any("cannot run" in w for w in get_study(folder)["warnings"])


def test_suggest_falls_back_and_without_a_named_fallback_the_key_is_required(
    study_home: Path, tmp_path: Path, no_key: None
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_study(proposer={**LLM, "fallback": "random"})))
    out = suggest_trials(path, 2)
    assert [s["source"] for s in out["suggestions"]] == ["fallback:random"] * 2
    assert any("cannot run" in n for n in out["notes"]), out["notes"]
    with pytest.raises(ProposerError) as refused:
        start_study(small_study(name="nofb", proposer=LLM), str(tmp_path / "nofb"))
    assert refused.value.code == "missing-api-key"
