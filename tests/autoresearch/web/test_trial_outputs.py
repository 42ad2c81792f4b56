"""Issue 38.6 on the study page: a trial's detail names where its job wrote (its checkpoint
folder, ./checkpoints and ./runs in its code view), as get_study and `air status` do. Asked
when the trial is opened (GET /api/studies/KEY/trials/N/outputs), never carried in the view,
whose first screen stays as small. A real study (sandboxed job) and a real `autoresearch serve`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ar_helpers import small_study
from web_helpers import get_json, serving

from autoresearch.api import get_study
from autoresearch.loop.loop import run_study
from autoresearch.study.study import parse_study

pytestmark = pytest.mark.slow
# Saves as researchers do: ./checkpoints and TensorBoard's ./runs, relative to where it runs.
WRITES = """
import os
os.makedirs("checkpoints", exist_ok=True)
os.makedirs("runs/exp1", exist_ok=True)
open("checkpoints/model.pt", "w").write("weights")
open("runs/exp1/events.out", "w").write("events")
print("---")
print("loss: 0.5")
"""


def outputs_study(tmp_path: Path) -> Path:
    """A one-trial study whose job writes ./checkpoints and ./runs; its folder."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(WRITES)
    data = small_study(
        name="outputs",
        command=[sys.executable, "train.py"],
        workdir=str(project),
        config_as="file",
        budget={"trials": 1, "concurrency": 1},
    )
    folder = tmp_path / "studies" / "outputs"
    result = run_study(parse_study(data), folder, poll_s=0.1)
    assert result.state.trials[0].status.value == "SUCCEEDED"
    return folder


def test_a_trial_s_outputs_are_named_by_the_page_api(study_home: Path, tmp_path: Path) -> None:
    folder = outputs_study(tmp_path)
    named = get_study(folder)["recent"][0]["outputs"]
    job = get_study(folder)["recent"][0]["job_id"]
    assert named[0] == str(study_home / "jobs" / job / "checkpoints")  # AIR_CHECKPOINT_DIR
    assert {Path(p).name for p in named[1:]} == {"checkpoints", "runs"}  # in its code view
    with serving(folder.parent) as base:
        status, got = get_json(base + "/api/studies/outputs/trials/0/outputs")
        assert status == 200
        assert got == {"trial": 0, "job_id": job, "outputs": named}  # what get_study names
        status, view = get_json(base + "/api/studies/outputs")
        assert "outputs" not in view["trials"][0]  # not in the view: the first screen is as small
        status, err = get_json(base + "/api/studies/outputs/trials/9/outputs")
        assert status == 404 and err["error"]["code"] == "not-found"
