"""A trial's patch that cannot be built fails that trial, never the loop (issue 30): a file
through an in-tree folder symlink killed the loop and every resume with FileExistsError."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from code_tree import PatchProposer, code_study, make_tree, patch_of, scale_patch

from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import StudyLoop
from autoresearch.study.study import check_runnable, parse_study

THROUGH_LINK = "--- /dev/null\n+++ b/lnk/new.py\n@@ -0,0 +1 @@\n+Y = 2\n"


def linked_tree(root: Path) -> Path:
    tree = make_tree(root)
    (tree / "pkg").mkdir()
    (tree / "pkg" / "mod.py").write_text("X = 1\n")
    os.symlink("pkg", tree / "lnk")
    return tree


def study_of(tree: Path, trials: int) -> Any:
    study = code_study(
        tree,
        code={"editable": ["model.py", "*/*.py"], "protected": ["evaluate.py"]},
        budget={"trials": trials, "concurrency": 1},
    )
    return check_runnable(parse_study(study))


def test_the_checker_refuses_a_file_through_a_folder_symlink(
    study_home: Path, tmp_path: Path
) -> None:
    tree = linked_tree(tmp_path / "tree")
    folder = tmp_path / "study"
    items = [{"patch": THROUGH_LINK, "why": "a new module through the link"}]
    loop = StudyLoop(study_of(tree, 2), folder, proposer=PatchProposer(items), poll_s=0.2)
    loop.run()  # it ends: the proposer has nothing more
    events = Journal(folder).read()
    (refused,) = [e for e in events if e["event"] == "invalid_proposal"]
    assert any("lnk is a symlink in the snapshot" in p for p in refused["problems"])
    st = replay(events)
    assert all(t.status == TrialStatus.SUCCEEDED for t in st.ordered())
    assert not (tree / "pkg" / "new.py").exists()


def test_a_journaled_patch_that_cannot_be_built_fails_its_trial_and_resume_goes_on(
    study_home: Path, tmp_path: Path
) -> None:
    tree = linked_tree(tmp_path / "tree")
    folder = tmp_path / "study"
    StudyLoop(study_of(tree, 1), folder, proposer=PatchProposer([]), poll_s=0.2).run()
    # what an earlier checker let through, journaled before the loop was killed
    Journal(folder).append("proposal", trial=1, source="scripted", diff={}, config={"x": 0.0},
                           rationale="through the link", patch=THROUGH_LINK)  # fmt: skip
    items = [{"patch": THROUGH_LINK}, {"patch": scale_patch(0.5), "why": "halve"}]
    loop = StudyLoop(
        study_of(tree, 3), folder, proposer=PatchProposer(items), poll_s=0.2, resume=True
    )
    assert loop.run().stop_reason == "budget:trials"
    events = Journal(folder).read()
    st = replay(events)
    t = st.trials
    assert t[1].status == TrialStatus.FAILED and t[1].failure_kind == "patch"
    assert "lnk is a symlink in the snapshot" in (t[1].failure or "") and t[1].job_id is None
    assert t[1].decision == "failed"
    assert t[2].status == TrialStatus.SUCCEEDED and t[2].decision == "keep"
    assert [e["trial"] for e in events if e["event"] == "launch_refused"] == [1]
    # the next resume replays it as failed and launches nothing for it
    again = StudyLoop(study_of(tree, 3), folder, proposer=PatchProposer(items), resume=True)
    assert again.run().stop_reason == "budget:trials"
    assert [e["trial"] for e in Journal(folder).read() if e["event"] == "launch_refused"] == [1]


def test_a_patch_the_tree_no_longer_holds_fails_at_launch_not_the_loop(
    study_home: Path, tmp_path: Path
) -> None:
    """The base passed the check; the tree changed since (a folder became a symlink): the
    launch refuses each trial's code, and the loop goes on to its budget."""
    tree = make_tree(tmp_path / "tree")
    (tree / "extra").mkdir()
    (tree / "extra" / "e.py").write_text("E = 1\n")
    folder = tmp_path / "study"
    StudyLoop(study_of(tree, 1), folder, proposer=PatchProposer([]), poll_s=0.2).run()
    (tree / "pkg").mkdir()
    (tree / "pkg" / "e.py").write_text("E = 1\n")
    (tree / "extra" / "e.py").unlink()
    (tree / "extra").rmdir()
    os.symlink("pkg", tree / "extra")
    change = patch_of("extra/e.py", "E = 1\n", "E = 2\n")
    items = [{"patch": change}, {"patch": scale_patch(0.5)}]
    loop = StudyLoop(
        study_of(tree, 3), folder, proposer=PatchProposer(items), poll_s=0.2, resume=True
    )
    assert loop.run().stop_reason == "budget:trials"
    t = replay(Journal(folder).read()).trials
    assert t[1].status == TrialStatus.FAILED and t[1].failure_kind == "patch", t[1].failure
    assert "extra is a symlink in the snapshot" in (t[1].failure or "")
    # any trial now needs the base's extra/e.py back through that link: each fails alone
    assert t[2].status == TrialStatus.FAILED and t[2].failure_kind == "patch"
