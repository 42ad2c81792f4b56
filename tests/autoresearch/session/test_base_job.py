"""A study on patched code (issue 24): ``base_job`` makes a job's code (its stored snapshot and
patch) and its config the study's base: every trial runs that code, the tree untouched."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest
from ar_helpers import small_study

from air_skills import Client
from air_skills.errors import NotFound
from autoresearch.api import start_study
from autoresearch.journal.journal import Journal

TRAIN = """\
import json, os
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("---")
print("loss:", c["x"] ** 2 * c["scale"])
"""


def _patch(old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), "a/train.py", "b/train.py"
    )
    return "".join(lines)


def test_trials_run_the_base_jobs_patched_code_and_config(study_home: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    patched = TRAIN.replace('c["scale"])', 'c["scale"] + 100)')
    client = Client()
    base = client.launch(
        {
            "command": [sys.executable, "train.py"],
            "workdir": str(work),
            "config": {"x": 0.5, "scale": 3},
            "patch": _patch(TRAIN, patched),
        }
    )
    assert client.wait([base.job_id], 120)[0].status.value == "SUCCEEDED"
    study = small_study(
        name="on-patch",
        command=["python", "train.py"],
        workdir=str(work),
        base_config={},
        search_space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        budget={"trials": 2, "concurrency": 1},
    )
    study["noise"] = {"repeats": 0}
    folder = tmp_path / "on-patch"
    start_study(study, str(folder), background=False, base_job=base.job_id)
    events = Journal(folder).read()
    finished = [e for e in events if e["event"] == "finished"]
    proposals = {e["trial"]: e["config"] for e in events if e["event"] == "proposal"}
    assert len(finished) == 2 and all(e["status"] == "SUCCEEDED" for e in finished)
    for e in finished:
        config = proposals[e["trial"]]
        assert config["scale"] == 3  # the base job's config is the base
        assert e["value"] == pytest.approx(config["x"] ** 2 * 3 + 100)  # its patched code ran
        assert client.get(e["job_id"]).code.patched
    assert (work / "train.py").read_text() == TRAIN  # the tree untouched
    with pytest.raises(NotFound):
        start_study({**study, "name": "nope"}, str(tmp_path / "nope"), base_job="job-0000000000")
