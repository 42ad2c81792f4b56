"""What a code snapshot holds: .airignore's gitignore subset, plain folders, git trees."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from air_skills.runtime.code.snapshot_files import IgnoreRules, list_files

HAS_GIT = shutil.which("git") is not None


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    return path


@pytest.mark.parametrize(
    ("patterns", "path", "is_dir", "ignored"),
    [
        (["*.ckpt"], "a/b/model.ckpt", False, True),
        (["*.ckpt"], "model.ckpt.py", False, False),
        (["data/"], "data", True, True),
        (["data/"], "data/x.csv", False, True),  # inside an ignored folder
        (["data/"], "data", False, False),  # trailing slash: folders only
        (["/build"], "build/x", False, True),
        (["/build"], "src/build/x", False, False),  # anchored at the root
        (["build"], "src/build/x", False, True),  # unanchored: any depth
        (["docs/*.md"], "docs/a.md", False, True),
        (["docs/*.md"], "docs/sub/a.md", False, False),  # * stops at /
        (["docs/**/*.md"], "docs/sub/deep/a.md", False, True),
        (["**/logs"], "a/b/logs", True, True),
        (["out/**"], "out/a/b", False, True),
        (["*.log", "!keep.log"], "keep.log", False, False),
        (["*.log", "!keep.log"], "other.log", False, True),
        (["# comment", "", "a?c"], "abc", False, True),
        (["data/", "!data/keep.csv"], "data/keep.csv", False, True),  # as git: parent wins
    ],
)
def test_airignore_subset(patterns: list[str], path: str, is_dir: bool, ignored: bool) -> None:
    assert IgnoreRules(patterns).ignored(path, is_dir) is ignored


def test_plain_folder_skips_git_pycache_venvs_and_airignore(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    for rel in ("a.py", "pkg/b.py", "pkg/__pycache__/b.pyc", "venv/pyvenv.cfg", "venv/lib/x.py",
                ".git/config", "big/weights.bin", "notes.tmp"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    (root / ".airignore").write_text("big/\n*.tmp\n")
    listing = list_files(root)  # tmp_path is outside any repository
    assert listing.mode == "folder"
    assert listing.paths == [".airignore", "a.py", "pkg/b.py"]


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_git_tree_lists_tracked_and_untracked_not_ignored(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".gitignore").write_text("*.ckpt\n")
    (repo / "train.py").write_text("print(1)\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "m.py").write_text("x = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "init")
    (repo / "new.py").write_text("y = 2\n")
    (repo / "w.ckpt").write_text("w")
    (repo / ".airignore").write_text("sub/\n")
    listing = list_files(repo / "sub")  # a workdir below the root: the whole repository
    assert listing.mode == "git" and listing.root == repo.resolve()
    assert listing.paths == [".airignore", ".gitignore", "new.py", "train.py"]
    assert listing.git is not None and listing.git.dirty and listing.git.commit


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_submodule_files_are_included(tmp_path: Path) -> None:
    lib = make_repo(tmp_path / "lib")
    (lib / "util.py").write_text("z = 3\n")
    git(lib, "add", ".")
    git(lib, "commit", "-qm", "lib")
    repo = make_repo(tmp_path / "repo")
    (repo / "main.py").write_text("import lib.util\n")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib")
    git(repo, "commit", "-qm", "with lib")
    assert "lib/util.py" in list_files(repo).paths


def test_git_missing_means_plain_folder_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.py").write_text("x")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    listing = list_files(tmp_path)
    assert listing.mode == "folder" and listing.paths == ["a.py"]
    assert len(listing.notes) == 1 and "git was not found" in listing.notes[0]
