"""The cold path written once: a snapshot writes the job's view from the bytes it read."""

from __future__ import annotations

import gc
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills.errors import InvalidInput, InvalidSpec
from air_skills.runtime.code.job_code import STAGING, CodePlan, materialize, plan_code
from air_skills.runtime.code.snapshot_store import blob_path, hash_file, prepare_store

PY = sys.executable


def make_tree(root: Path, files: int = 40) -> Path:
    """A plain folder (no git) of ``files`` small files in a few folders, one executable."""
    for i in range(files):
        path = root / f"pkg{i % 3}" / f"f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"x = {i}\n" * (i + 1))
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    return root


def staging(home: Path) -> list[str]:
    folder = home / "code" / STAGING
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def view_of(home: Path, plan: CodePlan, jdir: Path) -> tuple[Path, dict]:
    jdir.mkdir(parents=True)
    materialize(home, plan, jdir)
    return jdir / "code", json.loads((jdir / "code.json").read_text())


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "air_home"


def test_a_cold_view_holds_the_bytes_of_its_blobs_as_private_files(
    home: Path, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "tree")
    (tree / "big.bin").write_bytes(os.urandom(3_000_000))  # streamed in chunks, not in memory
    plan = plan_code(home, str(tree), None)
    assert plan.staged is not None and staging(home) == [plan.staged.name]
    view, record = view_of(home, plan, tmp_path / "job")
    assert record["copy"] == "written" and record["files_read"] == 42
    assert staging(home) == []  # moved into the job's folder, not copied
    files = plan.snapshot.manifest["files"]
    assert len(files) == 42
    for rel, entry in files.items():
        blob = blob_path(home, entry["sha256"])
        assert (view / rel).read_bytes() == blob.read_bytes() == (tree / rel).read_bytes()
        st, bst = (view / rel).stat(), blob.stat()
        assert st.st_ino != bst.st_ino and st.st_nlink == 1  # a copy, never a link to the blob
        assert st.st_mode & 0o200 and not bst.st_mode & 0o222  # view writable, blob read-only
        assert bool(st.st_mode & 0o111) == (entry["mode"] == 0o755)
    assert stat.S_IMODE((view / "run.sh").stat().st_mode) & 0o100
    assert os.listdir(home / "code" / "tmp") == []


def test_a_job_writing_to_its_view_leaves_the_store_intact(home: Path, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    plan = plan_code(home, str(tree), None)
    view, _ = view_of(home, plan, tmp_path / "job1")
    entry = plan.snapshot.manifest["files"]["pkg0/f0.py"]
    with open(view / "pkg0" / "f0.py", "r+b") as f:  # in place: the same inode
        f.write(b"overwritten")
    (view / "run.sh").unlink()
    assert blob_path(home, entry["sha256"]).read_bytes() == b"x = 0\n"
    again = plan_code(home, str(tree), None)
    assert again.snapshot.digest == plan.snapshot.digest
    view2, _ = view_of(home, again, tmp_path / "job2")
    assert (view2 / "pkg0" / "f0.py").read_bytes() == b"x = 0\n"
    assert (view2 / "run.sh").stat().st_mode & 0o100


def test_a_second_job_from_one_plan_copies_from_the_store(home: Path, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    plan = plan_code(home, str(tree), None)
    first, _ = view_of(home, plan, tmp_path / "job1")
    second, record = view_of(home, plan, tmp_path / "job2")
    assert record["copy"] == "copy"
    for rel in plan.snapshot.manifest["files"]:
        assert (first / rel).read_bytes() == (second / rel).read_bytes()


def test_a_patch_applies_on_the_written_view(home: Path, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree", files=3)
    patch = (
        "--- a/pkg0/f0.py\n+++ b/pkg0/f0.py\n@@ -1 +1 @@\n-x = 0\n+x = 100\n"
        "--- a/pkg1/f1.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x = 1\n-x = 1\n"
        "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+y = 2\n"
    )
    plan = plan_code(home, str(tree), patch)
    view, record = view_of(home, plan, tmp_path / "job")
    assert record["copy"] == "written" and record["patched"]
    assert (view / "pkg0" / "f0.py").read_text() == "x = 100\n"
    assert not (view / "pkg1" / "f1.py").exists() and (view / "new.py").read_text() == "y = 2\n"
    assert (tree / "pkg0" / "f0.py").read_text() == "x = 0\n" and (tree / "pkg1/f1.py").exists()


def test_a_refused_or_dropped_plan_leaves_no_staging(home: Path, tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree", files=3)
    bad = "--- a/pkg0/f0.py\n+++ b/pkg0/f0.py\n@@ -1 +1 @@\n-not there\n+x\n"
    with pytest.raises(InvalidSpec):
        plan_code(home, str(tree), bad)
    assert staging(home) == []
    (tree / "more.py").write_text("z = 1\n")  # a file to read: the next plan stages it
    plan = plan_code(home, str(tree), None)
    assert plan.staged is not None and plan.staged.is_dir()
    del plan
    gc.collect()
    assert staging(home) == []


def test_the_staging_of_a_dead_launcher_is_removed(home: Path, tmp_path: Path) -> None:
    dead = subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True)
    left = home / "code" / STAGING / f"{int(dead.stdout)}-0123abcd@{socket.gethostname()}"
    elsewhere = home / "code" / STAGING / f"{int(dead.stdout)}-4567abcd@another-host"
    elsewhere.mkdir(parents=True)  # a pid of another host says nothing here: kept
    (left / "pkg").mkdir(parents=True)
    (left / "pkg" / "a.py").write_text("x")
    plan = plan_code(home, str(make_tree(tmp_path / "tree", files=2)), None)
    assert plan.staged is not None
    assert staging(home) == sorted([plan.staged.name, elsewhere.name])


def test_a_file_changed_since_it_was_listed_is_read_again(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "f.py"
    src.write_bytes(b"old\n")
    listed = os.lstat(src)
    src.write_bytes(b"new, longer\n")  # between the listing and the read
    prepare_store(home)
    view = tmp_path / "view.py"
    sha, st = hash_file(home, str(src), "f.py", keep=True, view=str(view), listed=listed)
    assert view.read_bytes() == blob_path(home, sha).read_bytes() == b"new, longer\n"
    assert st.st_size == len(b"new, longer\n")


def test_a_file_written_during_every_read_is_refused_and_leaves_nothing(
    home: Path, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "tree", files=2)
    busy = tree / "busy.log"
    busy.write_bytes(b"x" * 4_000_000)  # a few ms to read: the writer lands inside each read
    writer = subprocess.Popen(
        [
            PY,
            "-c",
            "import sys\nf = open(sys.argv[1], 'ab', buffering=0)\nwhile True: f.write(b'y')",
            str(busy),
        ]  # fmt: skip
    )
    try:
        size = busy.stat().st_size
        wait_until(lambda: busy.stat().st_size > size)

        def refused() -> bool:
            try:
                plan_code(home, str(tree), None)
            except InvalidInput as exc:
                assert "busy.log changed while it was read" in str(exc)
                return True
            return False  # the writer was not scheduled during a read: try again

        wait_until(refused, timeout_s=120)
    finally:
        writer.kill()
        writer.wait()
    assert staging(home) == []
    assert os.listdir(home / "code" / "tmp") == []
