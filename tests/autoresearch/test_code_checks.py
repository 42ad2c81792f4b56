"""Code studies without running jobs: the study's code section, patch checks, composition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from code_tree import MODEL, TRAIN, code_study, make_tree, patch_of, scale_patch

from air_skills.errors import InvalidSpec
from air_skills.runtime.code.patch import apply_patch
from autoresearch.code.code_base import CodeBase
from autoresearch.code.code_check import check_patch
from autoresearch.code.code_diff import summarize, unified_diff
from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.study.study import parse_study


def problems_of(data: dict) -> list[str]:
    with pytest.raises(InvalidSpec) as info:
        parse_study(data)
    return info.value.problems


@pytest.fixture
def base(tmp_path: Path) -> CodeBase:
    tree = make_tree(tmp_path / "tree")
    return CodeBase.take(tmp_path / "home", parse_study(code_study(tree)))


def trial(number: int, status: TrialStatus = TrialStatus.SUCCEEDED, **kw) -> Trial:
    return Trial(number, {}, {}, "scripted", status=status, **kw)


def test_code_section_is_checked(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    found = problems_of(code_study(tree, code={"editable": ["a.py"], "protected": ["a.py"]}))
    assert any("editable and protected share a.py" in p for p in found)
    found = problems_of(code_study(tree, code={"editable": []}))
    assert any(p.startswith("code.editable") for p in found)
    found = problems_of(code_study(tree, code=None, evaluate="python evaluate.py"))
    assert any("evaluate: a trusted evaluator needs a `code` section" in p for p in found)
    # a code study may have no search space; a config-only study may not
    assert parse_study(code_study(tree, search_space={})).search_space == {}
    assert any("empty" in p for p in problems_of(code_study(tree, code=None, search_space={})))
    study = parse_study(
        code_study(tree, code={"editable": ["nothing*.py"], "protected": ["no.py"]})
    )
    with pytest.raises(InvalidSpec) as info:
        CodeBase.take(tmp_path / "home", study)
    text = " ".join(info.value.problems)
    assert "'nothing*.py' matches no file" in text and "'no.py' matches no file" in text


def test_base_records_editable_and_protected_digests(base: CodeBase) -> None:
    assert base.editable == ["model.py", "train.py"]
    assert set(base.protected) == {"evaluate.py"}
    assert base.record["mode"] == "folder" and base.record["commit"] is None
    assert base.read("model.py") == MODEL.encode()


def test_a_good_patch_passes_with_its_summary(base: CodeBase) -> None:
    checked = check_patch(base, {}, scale_patch(0.5), None)
    assert checked.problems == []
    assert checked.summary == {"files": {"model.py": [1, 1]}, "added": 1, "removed": 1}


@pytest.mark.parametrize(
    ("patch", "parent", "expected"),
    [
        (patch_of("evaluate.py", "x\n", "y\n"), None, "evaluate.py is protected"),
        (unified_diff("notes.txt", None, b"hi\n"), None, "notes.txt is not editable"),
        (scale_patch(0.5, old=3.0), None, "hunk 1"),  # does not apply
        (patch_of("model.py", MODEL, "SCALE = = 1\n"), None, "does not compile"),
        ("--- a/model.py\n+++ b/model.py\nGIT binary patch\n", None, "binary"),
        ("x" * (65 * 1024), None, "over code.max_patch_kb"),
        (scale_patch(0.5), 7, "parent 7: no such trial"),
        (scale_patch(0.5), 1, "parent 1 did not succeed"),
        (scale_patch(0.5), "one", "parent must be a trial number"),
    ],
)
def test_bad_patches_say_why(base: CodeBase, patch: str, parent: object, expected: str) -> None:
    trials = {1: trial(1, TrialStatus.FAILED)}
    checked = check_patch(base, trials, patch, parent)
    assert checked.patch is None
    assert any(expected in p for p in checked.problems), checked.problems


def test_a_patch_on_a_parent_applies_to_the_parents_code(base: CodeBase) -> None:
    trials = {1: trial(1, patch=scale_patch(0.5))}
    on_parent = scale_patch(0.25, old=0.5)
    assert check_patch(base, trials, on_parent, 1).problems == []
    assert check_patch(base, trials, on_parent, None).problems  # not on the base
    assert base.composed([scale_patch(0.5), on_parent]) == scale_patch(0.25)


def test_launch_patch_turns_a_changed_tree_back_into_the_base(base: CodeBase) -> None:
    root = Path(base.record["root"])
    patch, notes = base.launch_patch([scale_patch(0.5)])
    assert patch == scale_patch(0.5) and notes == []
    (root / "train.py").write_text(TRAIN + "print('edited')\n")
    (root / "evaluate.py").write_text("print('hacked')\n")
    (root / "new.py").write_text("x = 1\n")
    patch, notes = base.launch_patch([scale_patch(0.5)])
    assert notes and "trials still run the study's base" in notes[0]
    files = {p: (root / p).read_bytes() for p in ("train.py", "evaluate.py", "model.py")}
    result = apply_patch(patch, lambda p: files.get(p) if p != "new.py" else b"x = 1\n")
    assert result["train.py"] == TRAIN.encode()
    assert result["evaluate.py"] == base.read("evaluate.py")
    assert result["model.py"] == b"SCALE = 0.5\n" and result["new.py"] is None


def test_diff_round_trips_without_a_final_newline() -> None:
    before, after = b"a\nb", b"a\nc"
    text = unified_diff("f.py", before, after)
    tree = {"f.py": before}  # only f.py: a/f.py too would make the header ambiguous (-p0/-p1)
    assert apply_patch(text, tree.get)["f.py"] == after
    assert summarize(text)["files"] == {"f.py": [1, 1]}


def test_llm_patches_refused_go_back_once_then_fallback(base: CodeBase, llm_server) -> None:
    pytest.importorskip("anthropic")
    from autoresearch.proposers import ProposalRequest, suggest
    from autoresearch.proposers.llm import LLMProposer

    tree = Path(base.record["root"])
    study = parse_study(
        code_study(
            tree,
            proposer={
                "type": "llm",
                "provider": "anthropic",
                "max_retries": 0,
                "base_url": llm_server.anthropic_url,
            },
        )  # fmt: skip
    )
    evil = patch_of("evaluate.py", (tree / "evaluate.py").read_text(), "print('loss: 0')\n")
    broken = patch_of("model.py", MODEL, "SCALE = (\n")
    llm_server.anthropic_tool(
        [
            {"diff": {}, "patch": evil, "rationale": "edit the evaluator"},
            {"diff": {}, "patch": broken, "rationale": "broken"},
        ]
    )
    llm_server.anthropic_tool(
        [
            {"diff": {}, "patch": scale_patch(0.5, old=9.0), "rationale": "does not apply"},
            {"diff": {}, "patch": scale_patch(0.5), "rationale": "halve"},
        ]
    )
    done = Trial(0, {}, study.config_for({}), "baseline", status=TrialStatus.SUCCEEDED, value=1.0)
    request = ProposalRequest(study=study, trials=(done,), n=2, best_trial=0, code=base)
    result = suggest(LLMProposer(study.proposer), request)
    assert [p.patch for p in result.proposals][0] == scale_patch(0.5)
    assert result.proposals[1].source.startswith("fallback:") and result.proposals[1].patch is None
    refused = [f for k, f in result.events if k == "invalid_proposal"]
    assert [f["attempt"] for f in refused] == [1, 1, 2]
    assert refused[0]["patch"] == evil and "evaluate.py is protected" in refused[0]["problems"][0]
    assert "does not compile" in refused[1]["problems"][0]
    assert "hunk 1" in refused[2]["problems"][0]
    first, retry = (r.body for r in llm_server.requests)
    prompt = first["messages"][0]["content"]
    assert "## Code" in prompt and "SCALE = 1.0" in prompt and "evaluate.py" in prompt
    props = first["tools"][0]["input_schema"]["properties"]["trials"]["items"]["properties"]
    assert {"patch", "parent"} <= set(props)
    assert "evaluate.py is protected" in json.dumps(retry["messages"][-1])
