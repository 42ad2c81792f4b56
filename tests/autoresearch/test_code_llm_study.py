"""Code studies driven by the local wire-format LLM server: real trials run the patches it
returns, and a loop killed with kill -9 resumes with its patches and lineage intact."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from ar_helpers import start_loop
from code_tree import EVALUATE, MODEL, code_study, make_tree, patch_of, scale_patch

from autoresearch.journal.journal import Journal, StudyState, TrialStatus, replay
from autoresearch.loop.loop import run_study

POLL_S = 0.2


def llm_code_study(tree: Path, url: str, **overrides: Any) -> dict[str, Any]:
    pytest.importorskip("anthropic")  # the provider's SDK comes with the [llm] extra
    proposer = {"type": "llm", "provider": "anthropic", "max_retries": 0, "base_url": url}
    return code_study(tree, proposer=proposer, **overrides)


def journal(folder: Path, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in Journal(folder).read() if kind is None or e["event"] == kind]


def state(folder: Path) -> StudyState:
    return replay(journal(folder))


def test_llm_patches_kept_refused_and_replaced(
    study_home: Path, tmp_path: Path, llm_server: Any
) -> None:
    """One LLM patch improves the objective (kept), one touches the evaluator (refused,
    journaled, never run), one does not apply (retried, then the fallback's config diff),
    and one builds on the kept trial (its parent)."""
    tree = make_tree(tmp_path / "tree")
    study = llm_code_study(tree, llm_server.anthropic_url, budget={"trials": 4, "concurrency": 1})
    evil = patch_of("evaluate.py", EVALUATE, "print('---')\nprint('loss: -100')\n")
    stale = scale_patch(0.5, old=9.0)  # written against code that is not there
    llm_server.anthropic_tool([{"diff": {}, "patch": evil, "rationale": "grade it myself"}])
    llm_server.anthropic_tool([{"diff": {}, "patch": scale_patch(0.5), "rationale": "halve"}])
    llm_server.anthropic_tool([{"diff": {}, "patch": stale, "rationale": "stale 1"}])
    llm_server.anthropic_tool([{"diff": {}, "patch": stale, "rationale": "stale 2"}])
    on_parent = scale_patch(0.25, old=0.5)
    llm_server.anthropic_tool(
        [{"diff": {}, "patch": on_parent, "parent": 1, "rationale": "halve again"}]
    )
    folder = tmp_path / "study"
    result = run_study(study, folder, poll_s=POLL_S)
    assert result.stop_reason == "budget:trials"
    st = state(folder)
    t = st.trials
    assert [t[n].decision for n in range(4)] == ["baseline", "keep", "discard", "keep"]
    assert t[1].patch == scale_patch(0.5) and t[1].source == "llm"
    assert t[1].value == pytest.approx(0.5)
    assert t[2].source == "fallback:tpe" and t[2].patch is None and t[2].value >= 1.0
    assert t[3].parent == 1 and t[3].patch == on_parent and t[3].value == pytest.approx(0.25)
    assert st.best_trial == 3
    # refused patches are journaled with their text and the reasons; none of them ran
    refused = journal(folder, "invalid_proposal")
    assert [(r["attempt"], r["replaced_by"]) for r in refused] == [
        (1, "retry"),
        (1, "retry"),
        (2, "fallback"),
    ]
    assert refused[0]["patch"] == evil and "evaluate.py is protected" in refused[0]["problems"][0]
    assert refused[1]["patch"] == stale and "hunk 1" in refused[1]["problems"][0]
    (fallback,) = journal(folder, "fallback")
    assert fallback["reason"] == "LLM proposals still invalid after one retry"
    assert all(tr.patch not in (evil, stale) for tr in st.ordered())
    assert "loss: -100" not in Path(str(st.code_base["root"]), "evaluate.py").read_text()
    # each retry went back with the reasons; the last prompt shows the best patch and lineage
    bodies = llm_server.bodies()
    assert len(bodies) == 5
    assert "evaluate.py is protected" in json.dumps(bodies[1]["messages"][-1])
    last = bodies[4]["messages"][0]["content"]
    assert "SCALE = 0.5" in last and "model.py +1/-1" in last
    report = (folder / "report.md").read_text()
    assert "## Lineage" in report and "SCALE = 0.25" in report
    assert (tree / "model.py").read_text() == MODEL  # the user's tree is never touched


@pytest.mark.slow
def test_resume_after_kill_keeps_patches_and_lineage(
    study_home: Path, tmp_path: Path, llm_server: Any
) -> None:
    """Killed (kill -9) right after the baseline's decision, then right after the patched
    trial's proposal (its patch is only in the journal), the study resumes on the same base
    snapshot, launches that patch once, and builds the next patch on it."""
    tree = make_tree(tmp_path / "tree")
    study = llm_code_study(tree, llm_server.anthropic_url, budget={"trials": 3, "concurrency": 1})
    study_file, folder = tmp_path / "study.yaml", tmp_path / "study"
    study_file.write_text(yaml.safe_dump(study))
    on_parent = scale_patch(0.25, old=0.5)
    llm_server.anthropic_tool([{"diff": {}, "patch": scale_patch(0.5), "rationale": "halve"}])
    llm_server.anthropic_tool(
        [{"diff": {}, "patch": on_parent, "parent": 1, "rationale": "halve again"}]
    )

    for point in ("decision", "proposal"):
        resume = point != "decision"
        proc = start_loop(study_file, folder, crash_at=point, poll_s=POLL_S, resume=resume)
        try:
            assert proc.wait(timeout=120) == -signal.SIGKILL, proc.stderr.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert journal(folder)[-1]["event"] == point  # killed right after that line
        if point == "decision":
            # the user edits the tree between sessions: the study keeps its base snapshot
            (tree / "model.py").write_text("SCALE = 100.0\n")
    st = state(folder)
    assert st.trials[1].patch == scale_patch(0.5) and st.trials[1].status == TrialStatus.PROPOSED

    result = run_study(folder, resume=True, poll_s=POLL_S)
    assert result.stop_reason == "budget:trials"
    st = state(folder)
    t = st.trials
    assert [t[n].decision for n in range(3)] == ["baseline", "keep", "keep"]
    assert t[1].patch == scale_patch(0.5) and t[1].value == pytest.approx(0.5)
    assert t[2].parent == 1 and t[2].patch == on_parent and t[2].value == pytest.approx(0.25)
    assert [e["trial"] for e in journal(folder, "launched")] == [0, 1, 2]  # each once
    assert len(journal(folder, "code_base")) == 1 and st.sessions == 3
    assert all(t[n].code_digest for n in range(3))
    assert len(llm_server.requests) == 2  # nothing was asked twice
    report = (folder / "report.md").read_text()
    assert "## Lineage" in report and "SCALE = 0.25" in report
