"""Issue 38: a launch that is refused before anything ran leaves no study folder behind, so the
rerun after the fix is not refused as "already holds a journal"; a folder that was there
before the call is never removed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ar_helpers import small_study

from air_skills.errors import AirError
from autoresearch.api import get_study, start_study
from autoresearch.journal.journal import Journal, TrialStatus, replay


def _cli_run(study_file: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "autoresearch.cli", "run", str(study_file), "--dir", str(folder)]
    return subprocess.run([*cmd, "--poll-s", "0.2"], capture_output=True, text=True, timeout=180)


def _study_files(tmp_path: Path) -> tuple[Path, Path]:
    """A study that names a writable folder outside AIR_DATA_ROOTS (refused at its first
    launch), and the same study fixed (the folder dropped)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    data = small_study(name="refused", budget={"trials": 1, "concurrency": 1})
    refused, fixed = tmp_path / "refused.yaml", tmp_path / "fixed.yaml"
    refused.write_text(yaml.safe_dump({**data, "writable": [str(outside)]}))
    fixed.write_text(yaml.safe_dump(data))
    return refused, fixed


def test_a_refused_first_run_leaves_no_folder_and_the_fixed_rerun_runs(
    study_home: Path, tmp_path: Path
) -> None:
    refused, fixed = _study_files(tmp_path)
    folder = tmp_path / "study"
    res = _cli_run(refused, folder)
    assert res.returncode != 0 and "writable-refused" in res.stderr, res.stderr[-3000:]
    assert not folder.exists()  # journal and all: nothing ran
    res = _cli_run(fixed, folder)  # the same --dir
    assert res.returncode == 0, res.stderr[-3000:]
    st = replay(Journal(folder).read())
    assert st.trials[0].status == TrialStatus.SUCCEEDED


def test_a_refused_run_keeps_a_folder_that_was_there(study_home: Path, tmp_path: Path) -> None:
    refused, _ = _study_files(tmp_path)
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    res = _cli_run(refused, folder)
    assert res.returncode != 0 and "writable-refused" in res.stderr, res.stderr[-3000:]
    assert (folder / "notes.txt").read_text() == "mine"
    assert Journal(folder).read()  # the refusal stays journaled there


def test_start_study_refused_at_its_first_launch_takes_its_folder_back(
    study_home: Path, tmp_path: Path
) -> None:
    """The MCP tool's path: the loop runs in the background; its refusal comes back as the
    call's error, and the folder it made is gone."""
    refused, fixed = _study_files(tmp_path)
    folder = tmp_path / "study"
    with pytest.raises(AirError) as info:
        start_study(str(refused), str(folder))
    assert info.value.code == "writable-refused", info.value.to_dict()
    assert not folder.exists()
    start_study(str(fixed), str(folder), background=False)  # the same folder: not refused
    assert get_study(folder)["trials"]["total"] == 1
