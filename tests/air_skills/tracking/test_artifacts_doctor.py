"""`air doctor` names experiments whose artifacts live outside AIR_HOME and how to move them
(issue 38.4); the ones air makes are under AIR_HOME/mlartifacts. Real MLflow store."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from air_skills.tracking.mlflow import MlflowTracker
from air_skills.tracking.store_check import artifacts_check


def test_doctor_names_artifacts_outside_the_home(air_home: Path, tmp_path: Path) -> None:
    air_home.mkdir(parents=True, exist_ok=True)
    tracker = MlflowTracker(air_home)
    tracker.experiment_id("made-by-air")
    assert artifacts_check(air_home)["status"] == "ok"
    stray = tmp_path / "some-checkout" / "mlruns"
    stray.mkdir(parents=True)
    (stray / "notes.txt").write_text("an old artifact")
    older = tracker.client.create_experiment("older", artifact_location=stray.as_uri())
    tracker.client.create_run(older)  # an experiment with nothing in it has nothing to move
    check = artifacts_check(air_home)
    assert (
        check["status"] == "warn" and "'older'" in check["detail"] and str(stray) in check["detail"]
    )
    assert "cp -a" in check["next"] and "UPDATE experiments" in check["next"]
    if shutil.which("sqlite3") is None:
        pytest.skip("no sqlite3 command to run the fix with")
    subprocess.run(["bash", "-c", check["next"]], check=True)  # the fix, as said
    assert artifacts_check(air_home)["status"] == "ok"
    assert list((air_home / "mlartifacts").rglob("notes.txt"))


def test_mlflows_default_experiment_keeps_its_artifacts_under_the_home(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow makes its own ``Default`` experiment at ``<cwd>/mlruns/0``, and the template store
    copied to each new home carried the folder it was first built from (seen: every home's
    Default pointing into another checkout). A ``mlflow.start_run()`` with no experiment lands
    there. The store air builds points it under the home, whatever the current directory."""
    for folder in ("first-checkout", "second-checkout"):
        cwd = tmp_path / folder
        cwd.mkdir()
        monkeypatch.chdir(cwd)  # the template is built (or copied) from here
        home = air_home / folder
        home.mkdir(parents=True)
        client = MlflowTracker(home).client
        location = client.get_experiment("0").artifact_location
        assert location.startswith(home.resolve().as_uri() + "/mlartifacts/"), location
        assert artifacts_check(home)["status"] == "ok"
    assert not list(tmp_path.rglob("mlruns"))
