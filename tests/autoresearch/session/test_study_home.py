"""Studies out of the code tree (issue 24): a default folder under AIR_HOME, a registry that
finds a study by name wherever its folder is, study folders left out of every snapshot, and a
running loop that reads as running in every reply."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ar_helpers import TRIAL_SCRIPT, small_study, start_loop

from air_skills.runtime.code.snapshot_files import list_files
from air_skills.runtime.process.proc import alive, start_time
from autoresearch.api import get_study, start_study, stop_study
from autoresearch.study.folder import LOCK_FILE, LOOP_FILE, loop_alive


def _tree(root: Path, git: bool) -> Path:
    """A code tree holding the trial script (a git repository with one commit, or a folder)."""
    root.mkdir(parents=True)
    shutil.copy(TRIAL_SCRIPT, root / "train.py")
    if git:
        if shutil.which("git") is None:
            pytest.skip("git is not installed")
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        }
        for args in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "base"]):
            subprocess.run(["git", *args], cwd=root, check=True, env=env)
    return root


def test_the_default_folder_is_under_air_home_and_a_name_finds_any_folder(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = _tree(tmp_path / "work", git=False)
    monkeypatch.chdir(work)
    study = small_study(name="home-s", workdir=str(work), command=["python", "train.py"])
    study["budget"] = {"trials": 1, "concurrency": 1}
    start_study(study, background=False)
    assert (study_home / "studies" / "home-s" / "journal.jsonl").is_file()
    assert not (work / "studies").exists()  # never inside the code tree
    far = tmp_path / "elsewhere" / "far-folder"
    start_study({**study, "name": "far"}, str(far), background=False)
    monkeypatch.chdir(tmp_path)
    assert get_study("far")["study_dir"] == str(far.resolve())
    assert get_study("home-s")["state"] == "finished"


@pytest.mark.parametrize("git", [False, True])
def test_a_study_folder_inside_the_tree_is_never_part_of_a_snapshot(
    tmp_path: Path, git: bool
) -> None:
    work = _tree(tmp_path / "work", git)
    study = work / "studies" / "s"
    study.mkdir(parents=True)
    (study / "study.yaml").write_text("name: s\n")
    (study / "journal.jsonl").write_text('{"event": "session_started"}\n')
    (study / LOCK_FILE).write_text("")
    notes = work / "notes"  # a journal.jsonl of the user's own, with no study beside it
    notes.mkdir()
    (notes / "journal.jsonl").write_text("{}\n")
    paths = list_files(work).paths
    assert "train.py" in paths and "notes/journal.jsonl" in paths
    assert not [p for p in paths if p.startswith("studies/")], paths


def test_a_dropped_lock_of_a_live_loop_still_reads_as_running(tmp_path: Path) -> None:
    """A POSIX lock goes when its process closes any fd of the file: loop.json's pid and
    start time still say the loop lives (and an ended or dead loop does not)."""
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / LOCK_FILE).write_text("")  # nobody holds it
    proc = subprocess.Popen(["sleep", "60"])
    try:
        info = {"pid": proc.pid, "start": start_time(proc.pid), "host": os.uname().nodename}
        (folder / LOOP_FILE).write_text(json.dumps(info))
        assert loop_alive(folder) == info
        (folder / LOOP_FILE).write_text(json.dumps({**info, "ended_at": time.time()}))
        assert loop_alive(folder) is None
        (folder / LOOP_FILE).write_text(json.dumps({**info, "start": "1"}))  # a reused pid
        assert loop_alive(folder) is None
    finally:
        proc.kill()
        proc.wait()
    (folder / LOOP_FILE).write_text(json.dumps(info))
    assert not alive(proc.pid, info["start"]) and loop_alive(folder) is None


def _every_reply_says_running(folder: Path, pid: int, start: str | None) -> int:
    """get_study until the loop ends: each reply given while the loop lived says running
    (or, once the loop has journaled its end and is exiting, finished); never interrupted."""
    replies = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = get_study(folder)["state"]
        if not alive(pid, start) or state == "finished":  # ended during or before the reply
            return replies
        assert state == "running", f"reply {replies}: {state} while pid {pid} runs"
        replies += 1
        time.sleep(0.05)  # a poll's pace, not a synchronisation: the deadline above bounds it
    raise AssertionError("the loop did not end within 120 s")


def _slow_study(work: Path, name: str) -> dict:
    study = small_study(name=name, workdir=str(work), command=["python", "train.py"])
    study["base_config"] = {**study["base_config"], "sleep_s": 0.4}
    study["budget"] = {"trials": 4, "concurrency": 2}
    return study


@pytest.mark.slow
@pytest.mark.parametrize("inside", [True, False])
def test_a_loop_started_by_the_api_is_running_in_every_reply(
    study_home: Path, tmp_path: Path, inside: bool
) -> None:
    work = _tree(tmp_path / "work", git=True)
    folder = (work / "studies" / "live") if inside else (tmp_path / "out" / "live")
    started = start_study(_slow_study(work, "live"), str(folder))
    assert started["state"] == "running"
    pid = started["pid"]
    replies = _every_reply_says_running(folder, pid, start_time(pid))
    assert replies >= 2
    assert get_study("live")["state"] in ("finished", "running")
    stop_study(folder, timeout_s=30)


@pytest.mark.slow
def test_a_loop_started_by_the_cli_inside_the_tree_is_running_in_every_reply(
    study_home: Path, tmp_path: Path
) -> None:
    work = _tree(tmp_path / "work", git=True)
    folder = work / "studies" / "cli-live"
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(_slow_study(work, "cli-live")))
    proc = start_loop(study_file, folder)
    try:
        deadline = time.monotonic() + 60
        while not (folder / "journal.jsonl").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        replies = _every_reply_says_running(folder, proc.pid, start_time(proc.pid))
        assert replies >= 2
        assert proc.wait(timeout=60) == 0
        assert get_study("cli-live")["state"] == "finished"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
