"""A study file's relative paths start at its own folder (an inline study's at the caller's),
the other paths at the workdir, and a missing one names the path tried and why there."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ar_helpers import TRIAL_SCRIPT, small_study

from air_skills.errors import InvalidSpec
from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.study.study import check_runnable, load_study, parse_study

REPO = Path(__file__).resolve().parents[2]


def project(root: Path, **overrides: object) -> Path:
    """A folder with the trial script and a study file that names it relatively."""
    root.mkdir(parents=True)
    shutil.copy(TRIAL_SCRIPT, root / "trial_script.py")
    data = small_study(
        name="paths",
        command=["python", "trial_script.py"],
        workdir=".",
        base_config={"x": 0.0, "y": 0.0, "steps": 2, "sleep_s": 0.0},
        budget={"trials": 1, "concurrency": 1},
    )
    data.update(overrides)
    (root / "study.yaml").write_text(yaml.safe_dump(data))
    return root / "study.yaml"


def refusal(study: object) -> InvalidSpec:
    with pytest.raises(InvalidSpec) as info:
        check_runnable(study)  # type: ignore[arg-type]
    assert info.value.code == "invalid-spec" and info.value.hint
    return info.value


def test_a_study_files_workdir_is_relative_to_its_folder_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study_file = project(tmp_path / "proj")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    study = check_runnable(load_study(Path("..") / "proj" / "study.yaml"))
    assert study.workdir == str(study_file.parent.resolve())
    assert study.command == ["python", "trial_script.py"]  # argv stays relative: snapshots

    study_file.write_text(study_file.read_text().replace("workdir: .", "workdir: sub"))
    (study_file.parent / "sub").mkdir()
    shutil.move(study_file.parent / "trial_script.py", study_file.parent / "sub")
    assert check_runnable(load_study(study_file)).workdir == str(study_file.parent / "sub")


def test_a_missing_script_names_the_path_tried_and_what_the_workdir_resolved_against(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study_file = project(tmp_path / "proj", command=["python", "trian.py"])
    monkeypatch.chdir(tmp_path)
    err = refusal(load_study(study_file))
    folder = study_file.parent
    assert err.problems == [
        f"command: workdir '.' resolved against the study file's folder {folder}:"
        f" {folder / 'trian.py'} not found",
        f"command: workdir '.' resolved against the current folder {tmp_path}:"
        f" {tmp_path / 'trian.py'} not found",
    ]

    study_file.write_text(study_file.read_text().replace("workdir: .", "workdir: nope"))
    err = refusal(load_study(study_file))
    assert err.problems == [
        f"workdir 'nope' resolved against the study file's folder {folder}:"
        f" folder {folder / 'nope'} not found"
    ]


def test_data_and_evaluator_paths_are_relative_to_the_workdir(tmp_path: Path) -> None:
    study_file = project(
        tmp_path / "proj",
        workdir="code",
        data=[{"name": "train", "path": "data/train.txt"}],
        code={"editable": ["trial_script.py"]},
        evaluate="python evaluate.py",
    )
    code = study_file.parent / "code"
    code.mkdir()
    shutil.move(study_file.parent / "trial_script.py", code)
    err = refusal(load_study(study_file))
    note = f"workdir 'code' resolved against the study file's folder {study_file.parent}"
    assert err.problems == [
        f"evaluate.command: {note}: {code / 'evaluate.py'} not found",
        f"data.train: {note}: {code / 'data' / 'train.txt'} not found",
    ]
    (code / "evaluate.py").write_text("")
    (code / "data").mkdir()
    (code / "data" / "train.txt").write_text("x")
    assert check_runnable(load_study(study_file)).workdir == str(code)


def test_an_inline_study_resolves_against_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study_file = project(tmp_path / "proj")
    inline = yaml.safe_load(study_file.read_text())
    monkeypatch.chdir(tmp_path)
    err = refusal(load_study(inline))
    assert err.problems == [
        f"command: workdir '.' resolved against the current folder {tmp_path.resolve()}:"
        f" {tmp_path.resolve() / 'trial_script.py'} not found"
    ]
    monkeypatch.chdir(study_file.parent)
    assert check_runnable(load_study(inline)).workdir == str(study_file.parent.resolve())
    # an absolute workdir needs no anchor and says so
    absolute = parse_study({**inline, "workdir": str(tmp_path / "gone")})
    assert refusal(absolute).problems == [
        f"workdir {str(tmp_path / 'gone')!r}: folder {tmp_path / 'gone'} not found"
    ]


def test_a_study_folders_own_study_file_resolves_against_that_folder(tmp_path: Path) -> None:
    folder = project(tmp_path / "folder").parent
    assert check_runnable(load_study(folder)).workdir == str(folder.resolve())


@pytest.mark.parametrize("example", ["mlp", "tinygpt"])
def test_the_examples_run_from_any_folder(
    example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autoresearch.cli import demo_study, find_examples

    monkeypatch.chdir(tmp_path)
    study = check_runnable(load_study(REPO / "examples" / example / "study.yaml"))
    assert study.workdir == str(REPO)
    demo = check_runnable(parse_study(demo_study(find_examples(), "tpe", 2)))
    assert demo.workdir == str(REPO)


def test_autoresearch_run_from_another_folder_runs_the_files_study_and_resumes_from_it(
    study_home: Path, tmp_path: Path
) -> None:
    study_file = project(tmp_path / "proj")
    (tmp_path / "elsewhere").mkdir()
    folder = tmp_path / "study"
    cmd = [sys.executable, "-m", "autoresearch.cli", "run", "../proj/study.yaml"]
    done = subprocess.run(
        [*cmd, "--dir", str(folder), "--poll-s", "0.2"],
        cwd=tmp_path / "elsewhere",
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    state = replay(Journal(folder).read())
    assert state.trials[0].status == TrialStatus.SUCCEEDED
    # the folder's saved study holds the absolute workdir: a resume needs no cwd
    saved = yaml.safe_load((folder / "study.yaml").read_text())
    assert saved["workdir"] == str(study_file.parent.resolve())
    assert check_runnable(load_study(folder)).workdir == saved["workdir"]


def test_a_study_file_written_to_run_from_the_current_folder_still_runs_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DESIGN.md's example: `workdir: .` and the script's path from the repo root, the file
    in a subfolder. Nothing from the file's folder: the folder the user runs from is used."""
    root = tmp_path / "repo"
    (root / "exp").mkdir(parents=True)
    shutil.copy(TRIAL_SCRIPT, root / "exp" / "trial_script.py")
    study_file = project(tmp_path / "elsewhere", command=["python", "exp/trial_script.py"])
    monkeypatch.chdir(root)
    assert check_runnable(load_study(study_file)).workdir == str(root.resolve())
    # From a folder where neither works, both places tried are named.
    monkeypatch.chdir(tmp_path)
    problems = refusal(load_study(study_file)).problems
    assert problems == [
        f"command: workdir '.' resolved against the study file's folder {study_file.parent}:"
        f" {study_file.parent / 'exp' / 'trial_script.py'} not found",
        f"command: workdir '.' resolved against the current folder {tmp_path}:"
        f" {tmp_path / 'exp' / 'trial_script.py'} not found",
    ]
