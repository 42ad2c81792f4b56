"""The plain functions the MCP server registers, and the package's public names."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ar_helpers import small_study

import autoresearch
from air_skills.errors import InvalidInput, InvalidState, NotFound
from autoresearch.api import get_study, start_study, suggest_trials
from autoresearch.journal.journal import Journal
from autoresearch.study.folder import LoopLock, loop_alive


def test_public_names_are_locked() -> None:
    assert sorted(autoresearch.__all__) == sorted(
        [
            "Proposer",
            "Study",
            "StudyLoop",
            "get_study",
            "load_study",
            "make_proposer",
            "parse_study",
            "run_study",
            "start_study",
            "stop_study",
            "suggest_trials",
            "write_report",
        ]
    )
    for name in autoresearch.__all__:
        assert getattr(autoresearch, name)


def test_suggest_from_a_study_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_study(proposer="tpe")))
    out = suggest_trials(path, 3)
    assert out["history"] == 0 and len(out["suggestions"]) == 3
    for s in out["suggestions"]:
        assert set(s) == {"diff", "config", "rationale", "source"}
        assert s["config"]["steps"] == 3 and s["source"] == "tpe"
    with pytest.raises(InvalidInput):
        suggest_trials(path, 0)


def test_suggest_from_a_study_folder_uses_its_history(tmp_path: Path, llm_server) -> None:
    pytest.importorskip("anthropic")  # the [llm] extra
    from autoresearch.study.study import parse_study

    study = parse_study(small_study(proposer={"type": "llm", "base_url": llm_server.anthropic_url}))
    j = Journal(tmp_path)
    j.append("session_started", study=study.to_dict(), study_id="s1", gpus_per_trial=0)
    j.append("proposal", trial=0, source="baseline", diff={}, config=study.config_for({}))
    j.append("launched", trial=0, job_id="job-0000000000", attempt=1)
    j.append("finished", trial=0, status="SUCCEEDED", value=0.7, started_at=1.0, ended_at=2.0)
    j.append("decision", trial=0, decision="baseline", best_trial=0, best_value=0.7)
    llm_server.anthropic_tool([{"diff": {"x": 0.3}, "rationale": "closer to the optimum"}])
    out = suggest_trials(tmp_path, 1)
    assert out["history"] == 1
    assert out["suggestions"][0]["diff"] == {"x": 0.3}
    assert out["suggestions"][0]["rationale"] == "closer to the optimum"
    assert (
        "| 0* | (base) | SUCCEEDED | 0.7" in llm_server.requests[0].body["messages"][0]["content"]
    )
    assert out["llm_usd"] > 0
    assert get_study(tmp_path)["budget"]["llm_usd"]["used"] == pytest.approx(out["llm_usd"])


def test_get_study_of_nothing(tmp_path: Path) -> None:
    with pytest.raises(NotFound) as info:
        get_study(tmp_path)
    assert info.value.hint


def test_get_study_says_interrupted_and_how_to_resume(tmp_path: Path) -> None:
    from autoresearch.study.study import parse_study

    study = parse_study(small_study())
    j = Journal(tmp_path)
    j.append("session_started", study=study.to_dict(), study_id="s1", gpus_per_trial=0)
    j.append("proposal", trial=0, source="baseline", diff={}, config=study.config_for({}))
    j.append("launched", trial=0, job_id="job-0000000000", attempt=1)
    out = get_study(tmp_path)
    assert out["state"] == "interrupted" and "--resume" in out["hint"]
    assert out["running"][0]["job_id"] == "job-0000000000"
    with LoopLock(tmp_path):
        assert loop_alive(tmp_path)
        assert get_study(tmp_path)["state"] == "running"
        with pytest.raises(InvalidState):
            start_study(tmp_path, resume=True)
    assert loop_alive(tmp_path) is None


def test_start_study_refuses_a_used_folder(tmp_path: Path) -> None:
    Journal(tmp_path).append("session_started", study=small_study(), study_id="s")
    with pytest.raises(InvalidState) as info:
        start_study(small_study(), tmp_path)
    assert "resume" in info.value.hint
