"""Real code studies: real processes run scripted patches on the study's base snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from code_tree import MODEL, TRAIN, PatchProposer, code_study, make_tree, patch_of, scale_patch

from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import StudyLoop
from autoresearch.study.study import check_runnable, parse_study

POLL_S = 0.2


def run(study: dict[str, Any], folder: Path, items: list[dict[str, Any]]) -> Any:
    parsed = check_runnable(parse_study(study))
    return StudyLoop(parsed, folder, proposer=PatchProposer(items), poll_s=POLL_S).run()


def events(folder: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in Journal(folder).read() if e["event"] == kind]


@pytest.mark.slow
def test_patches_run_on_the_base_tampering_never_counts(study_home: Path, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    study = code_study(
        tree,
        base_config={"x": 0.0, "tamper": False},
        search_space={
            "x": {"type": "float", "low": 0.0, "high": 1.0},
            "tamper": {"type": "choice", "values": [False, True]},
        },
        budget={"trials": 4, "concurrency": 1},
    )
    items = [
        {"patch": scale_patch(0.5), "why": "halve the scale"},
        {"diff": {"tamper": True}, "patch": scale_patch(0.1), "why": "writes the evaluator"},
        {"patch": scale_patch(0.25, old=0.5), "parent": 1, "why": "halve it again"},
    ]
    folder = tmp_path / "study"
    result = run(study, folder, items)
    assert result.stop_reason == "budget:trials"
    st = replay(Journal(folder).read())
    t = st.trials
    assert [t[n].decision for n in range(4)] == ["baseline", "keep", "tampered", "keep"]
    assert t[0].value == pytest.approx(1.0) and t[1].value == pytest.approx(0.5)
    assert t[3].value == pytest.approx(0.25) and t[3].parent == 1
    assert t[2].failure_kind == "tampered" and "evaluate.py" in t[2].failure
    assert st.tampered == {2: ["evaluate.py"]} and st.best_trial == 3
    # lineage in the journal: patch, parent, config, snapshot digest for every trial
    assert t[1].patch == scale_patch(0.5) and t[1].patch_summary["files"] == {"model.py": [1, 1]}
    assert all(t[n].code_digest for n in range(4))
    (base,) = events(folder, "code_base")
    assert base["protected"].keys() == {"evaluate.py"} and base["digest"] == st.code_base["digest"]
    # the user's tree is never touched
    assert (tree / "model.py").read_text() == MODEL and (tree / "train.py").read_text() == TRAIN
    assert "loss: -100" not in (tree / "evaluate.py").read_text()
    report = (folder / "report.md").read_text()
    assert "## Lineage" in report and "SCALE = 0.25" in report


@pytest.mark.slow
def test_evaluator_and_confirmation_keep_only_what_survives(
    study_home: Path, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "tree")
    lucky = TRAIN.replace(
        "ckpt = Path", 'loss -= 0.9 if cfg.get("seed", 0) == 0 else 0.0\nckpt = Path'
    )
    study = code_study(
        tree,
        base_config={"x": 0.0, "seed": 0},
        evaluate="python evaluate.py",
        noise={"repeats": 2, "confirm_seeds": 2, "confirm": "always"},
        budget={"trials": 9, "concurrency": 3},
    )
    items = [
        {"patch": patch_of("train.py", TRAIN, lucky), "why": "lucky on seed 0 only"},
        {"patch": scale_patch(0.5), "why": "truly better"},
    ]
    folder = tmp_path / "study"
    run(study, folder, items)
    st = replay(Journal(folder).read())
    by_why = {t.rationale: t for t in st.ordered()}
    luck, good = by_why["lucky on seed 0 only"], by_why["truly better"]
    # the evaluator's objective (loss + 0.5), not the trial's own
    (fin,) = [e for e in events(folder, "finished") if e["trial"] == good.number]
    assert fin["value"] == pytest.approx(1.0) and fin["reported"] == pytest.approx(0.5)
    assert luck.value == pytest.approx(0.6)  # screened: it looks better than the base's 1.5
    confirms = [t for t in st.ordered() if t.source == "confirm"]
    assert sorted(c.confirms for c in confirms) == sorted([luck.number] * 2 + [good.number] * 2)
    assert luck.decision == "discard" and good.decision == "keep"
    assert good.confirmed["n"] == 3 and good.confirmed["paired"] == 2
    assert good.confirmed["mean"] == pytest.approx(1.0) and st.best_trial == good.number
    assert "±" in (folder / "report.md").read_text()


def test_an_evaluator_that_prints_no_objective_fails_the_trial(
    study_home: Path, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "tree")
    (tree / "evaluate.py").write_text("print('no summary here')\n")
    study = code_study(tree, evaluate="python evaluate.py", budget={"trials": 1})
    folder = tmp_path / "study"
    run(study, folder, [])
    (t,) = replay(Journal(folder).read()).ordered()
    assert t.status == TrialStatus.FAILED and t.failure_kind == "evaluator"
    assert "printed no objective 'loss'" in t.failure


def test_export_commits_the_winner_on_a_new_branch(study_home: Path, tmp_path: Path) -> None:
    import subprocess

    from autoresearch.report.export import CONFIG_FILE, export_study

    tree = make_tree(tmp_path / "repo")
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    folder = tmp_path / "study"
    run(code_study(tree, budget={"trials": 2, "concurrency": 1}), folder,
        [{"patch": scale_patch(0.5), "why": "halve"}])  # fmt: skip
    done = export_study(folder, "air/winner", home=study_home)
    assert done["trial"] == 1 and done["branch"] == "air/winner"
    show = lambda *a: subprocess.run([*git, *a], capture_output=True, text=True).stdout  # noqa: E731
    assert show("show", "air/winner:model.py") == "SCALE = 0.5\n"
    assert '"x": 0.0' in show("show", f"air/winner:{CONFIG_FILE}")
    assert "study code, trial 1: loss = 0.5" in show("log", "-1", "--format=%B", "air/winner")
    assert show("rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert (tree / "model.py").read_text() == MODEL and not show("status", "--porcelain")


def test_get_study_gives_the_best_patch_and_mcp_serves_it(study_home: Path, tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client as McpClient

    from autoresearch.api import get_study
    from autoresearch.report.summary import patch_uri
    from mcp_server.server import build_server

    tree = make_tree(tmp_path / "tree")
    folder = tmp_path / "my studies" / "code"
    run(code_study(tree, budget={"trials": 2, "concurrency": 1}), folder,
        [{"patch": scale_patch(0.5), "why": "halve"}])  # fmt: skip
    best = get_study(folder)["best"]
    assert best["trial"] == 1 and best["parent"] is None
    assert best["patch_summary"] == {"files": {"model.py": [1, 1]}, "added": 1, "removed": 1}
    assert best["patch_resource"] == patch_uri(folder.resolve(), 1)

    async def read(uri: str) -> str:
        async with McpClient(build_server()) as mcp:
            try:
                got = await mcp.read_resource(uri)
            except Exception as exc:  # the resource's error, as the client sees it
                return f"error: {exc}"
            return got.contents[0].text  # type: ignore[union-attr]

    assert anyio.run(read, best["patch_resource"]) == scale_patch(0.5)
    assert "[not-found] no trial 9" in anyio.run(read, patch_uri(folder.resolve(), 9))


def test_the_evaluator_gets_no_secret_of_the_loop(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37.5's class: the evaluator (it reads what a trial wrote) runs with job_env's
    allow-list, as a trial does: never the loop's AIR_MCP_TOKEN or its LLM proposer's key."""
    monkeypatch.setenv("AIR_MCP_TOKEN", "owner-token-of-the-loop")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-the-proposers-key")
    tree = make_tree(tmp_path / "tree")
    (tree / "evaluate.py").write_text(
        "import os\n"
        "leaked = [k for k in ('AIR_MCP_TOKEN', 'ANTHROPIC_API_KEY') if k in os.environ]\n"
        "print('---')\n"
        "print('loss:', 99 if leaked else 1)\n"
    )
    study = code_study(tree, evaluate="python evaluate.py", budget={"trials": 1})
    folder = tmp_path / "study"
    run(study, folder, [])
    (t,) = replay(Journal(folder).read()).ordered()
    assert t.status == TrialStatus.SUCCEEDED, t.failure
    assert t.value == pytest.approx(1.0)


def test_the_evaluator_gets_the_studys_env_without_reserved_names(
    study_home: Path, tmp_path: Path
) -> None:
    """Issue 38: a trial gets job_env's allow-list and the study's ``env``; the protected
    evaluator gets both too, the study's env filtered as a trial's spec env is (reserved names
    such as CUDA_VISIBLE_DEVICES dropped: the runtime's values win)."""
    tree = make_tree(tmp_path / "tree")
    (tree / "evaluate.py").write_text(
        "import os\n"
        "ok = os.environ.get('EVAL_SCALE') == '0.25'\n"
        "ok = ok and os.environ.get('CUDA_VISIBLE_DEVICES') != '7'\n"
        "print('---')\n"
        "print('loss:', 1 if ok else 99)\n"
    )
    study = code_study(
        tree,
        evaluate="python evaluate.py",
        budget={"trials": 1},
        env={"EVAL_SCALE": "0.25", "CUDA_VISIBLE_DEVICES": "7"},
    )
    folder = tmp_path / "study"
    run(study, folder, [])
    (t,) = replay(Journal(folder).read()).ordered()
    assert t.status == TrialStatus.SUCCEEDED, t.failure
    assert t.value == pytest.approx(1.0)
