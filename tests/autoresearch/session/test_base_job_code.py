"""A code study on patched code (issue 24, item 8): with ``base_job`` and a ``code:`` section,
the job's snapshot, patch and config are the study's base; the trials' patches apply on top of
it, the trusted evaluator runs the base's own (patched) files, and the tree is never touched."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from code_tree import EVALUATE, MODEL, TRAIN, PatchProposer, code_study, make_tree, patch_of

from air_skills import Client
from autoresearch.api import start_study
from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import StudyLoop
from autoresearch.study.study import parse_study

# the base job's patch: a smaller model scale, and an evaluator that adds 0.25 instead of 0.5
BASE_PATCH = patch_of("model.py", MODEL, "SCALE = 0.8\n") + patch_of(
    "evaluate.py", EVALUATE, EVALUATE.replace("value + 0.5", "value + 0.25")
)


def _base_job(tree: Path) -> str:
    client = Client()
    info = client.launch(
        {
            "command": [sys.executable, "train.py"],
            "workdir": str(tree),
            "config": {"x": 0.5},
            "patch": BASE_PATCH,
        }
    )
    (done,) = client.wait([info.job_id], 120)
    assert done.status.value == "SUCCEEDED", done.message
    return info.job_id


def test_code_trials_patch_on_top_of_the_base_jobs_code(study_home: Path, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    job = _base_job(tree)
    study = code_study(
        tree,
        base_config={},
        evaluate="python evaluate.py",
        noise={"repeats": 0},
        budget={"trials": 3, "concurrency": 1},
        base_job=job,
    )
    items = [  # patches written against the base job's code (SCALE = 0.8), not the tree's
        {"patch": patch_of("model.py", "SCALE = 0.8\n", "SCALE = 0.4\n"), "why": "halve it"},
        {
            "patch": patch_of("model.py", "SCALE = 0.4\n", "SCALE = 0.2\n"),
            "parent": 1,
            "why": "halve it again",
        },  # fmt: skip
    ]
    folder = tmp_path / "study"
    StudyLoop(parse_study(study), folder, proposer=PatchProposer(items), poll_s=0.2).run()
    st = replay(Journal(folder).read())
    t = st.trials
    assert [t[n].status for n in range(3)] == [TrialStatus.SUCCEEDED] * 3, [
        t[n].failure for n in range(3)
    ]
    # loss = SCALE * (1 + x), x = 0.5 from the base job's config; the base's evaluator adds 0.25
    assert [t[n].value for n in range(3)] == pytest.approx([1.45, 0.85, 0.55])
    assert st.best_trial == 2 and t[2].parent == 1
    assert st.code_base["base_job"] == job and st.code_base["protected"].keys() == {"evaluate.py"}
    client = Client()
    for n in range(3):
        view = client.get(t[n].job_id).code
        assert view.patched  # every trial ran the job's snapshot with one composed patch
    # the tree is never touched
    assert (tree / "model.py").read_text() == MODEL and (tree / "train.py").read_text() == TRAIN
    assert (tree / "evaluate.py").read_text() == EVALUATE


def test_start_study_takes_base_job_with_a_code_section(study_home: Path, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    job = _base_job(tree)
    study = code_study(tree, base_config={}, noise={"repeats": 0}, budget={"trials": 1})
    folder = tmp_path / "via-api"
    start_study(study, str(folder), background=False, base_job=job)
    (t,) = replay(Journal(folder).read()).ordered()
    assert t.status == TrialStatus.SUCCEEDED and t.value == pytest.approx(0.8 * 1.5)
    # the base job's code: a glob that matches none of its files is refused before any trial
    bad = code_study(tree, name="bad", code={"editable": ["nope.py"]}, budget={"trials": 1})
    with pytest.raises(Exception, match="matches no file of job"):
        start_study(bad, str(tmp_path / "bad"), background=False, base_job=job)
