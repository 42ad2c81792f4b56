"""Code snapshots end to end: real git repositories, real jobs, the store and the job's view."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from snapshot_repo import PATCH, TRAIN, finished, git, launch, make_repo

from air_skills import Client
from air_skills.errors import AirError

PY = sys.executable
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def test_an_edit_after_launch_does_not_reach_the_job(client: Client, repo: Path) -> None:
    marker = repo.parent / "go"
    info = launch(client, repo, marker)
    assert info.code is not None and info.code.commit == git(repo, "rev-parse", "HEAD").strip()
    assert info.code.branch == "main" and not info.code.dirty and info.code.files == 2
    (repo / "model.py").write_text("VALUE = 2\n")  # the agent edits while the job waits
    marker.touch()
    done = finished(client, info.job_id)
    assert done.status == "SUCCEEDED", client.logs(info.job_id).text
    text = client.logs(info.job_id).text
    assert "model says 1" in text and f"digest {info.code.digest}" in text


def test_live_code_runs_in_the_workdir(client: Client, repo: Path) -> None:
    marker = repo.parent / "go"
    info = launch(client, repo, marker, code="live")
    assert info.code is None
    (repo / "model.py").write_text("VALUE = 2\n")
    marker.touch()
    finished(client, info.job_id)
    assert "model says 2 digest none" in client.logs(info.job_id).text


def test_fifty_jobs_store_the_tree_once(client: Client, repo: Path) -> None:
    for i in range(5):
        (repo / f"mod{i}.py").write_text(f"X = {i}\n")
    ids = []
    for _ in range(50):  # all 4 GPUs each: one runs at a time, the rest wait in the queue
        info = client.launch(
            {"command": [PY, "-c", "pass"], "workdir": str(repo), "track": False, "gpus": 4}
        )
        ids.append(info.job_id)
    blobs = [p for p in (client.home / "code" / "blobs").rglob("*") if p.is_file()]
    assert len(blobs) == 7  # train.py, model.py, mod0-4.py: once each
    assert {client.get(j).code.digest for j in ids} == {client.get(ids[0]).code.digest}
    assert all(not os.access(b, os.W_OK) or os.geteuid() == 0 for b in blobs)
    views = {client.home / "jobs" / j / "code" for j in ids}
    assert all((v / "mod4.py").read_text() == "X = 4\n" for v in views)


def test_dirty_tree_records_its_diff_and_mlflow_tags(client: Client, repo: Path) -> None:
    git(repo, "remote", "add", "origin", "https://example.com/team/repo.git")
    (repo / "model.py").write_text("VALUE = 3\n")
    marker = repo.parent / "go"
    marker.touch()
    info = launch(client, repo, marker, track=True)
    assert info.code is not None and info.code.dirty and info.run_id
    run = client.tracker.client.get_run(info.run_id)
    tags = run.data.tags
    assert tags["mlflow.source.git.commit"] == info.code.commit
    assert tags["mlflow.source.git.branch"] == "main"
    assert tags["mlflow.source.git.repoURL"] == "https://example.com/team/repo.git"
    assert tags["air.code.digest"] == info.code.digest
    got = client.tracker.client.download_artifacts(info.run_id, "code/dirty.diff", str(repo.parent))
    diff = Path(got).read_text()
    assert "-VALUE = 1" in diff and "+VALUE = 3" in diff
    finished(client, info.job_id)
    assert "model says 3" in client.logs(info.job_id).text


def test_patch_runs_patched_code_and_leaves_the_tree(client: Client, repo: Path) -> None:
    marker = repo.parent / "go"
    marker.touch()
    plain = launch(client, repo, marker)
    info = launch(client, repo, marker, patch=PATCH)
    assert info.code is not None and info.code.patched
    assert info.code.digest == plain.code.digest  # the same snapshot; the patch is on top
    finished(client, info.job_id)
    assert "model says 42" in client.logs(info.job_id).text
    assert (repo / "model.py").read_text() == "VALUE = 1\n"
    assert git(repo, "status", "--porcelain") == ""
    assert (client.home / "jobs" / info.job_id / "code.patch").read_text() == PATCH


def test_a_job_that_deletes_its_files_leaves_the_store_and_others(
    client: Client, repo: Path
) -> None:
    wreck = "import os, shutil\nfor n in os.listdir('.'): os.remove(n)\nopen('out', 'w').write('x')"
    first = client.launch({"command": [PY, "-c", wreck], "workdir": str(repo), "track": False})
    assert finished(client, first.job_id).status == "SUCCEEDED"
    view = client.home / "jobs" / first.job_id / "code"
    assert os.listdir(view) == ["out"]
    assert (repo / "model.py").exists() and not (repo / "out").exists()
    marker = repo.parent / "go"
    marker.touch()
    second = launch(client, repo, marker)
    assert second.code.digest == first.code.digest
    assert finished(client, second.job_id).status == "SUCCEEDED"
    assert "model says 1" in client.logs(second.job_id).text


def test_dry_run_says_what_would_be_snapshotted_and_stores_nothing(
    client: Client, repo: Path
) -> None:
    info = client.launch({"command": [PY, "train.py"], "workdir": str(repo)}, dry_run=True)
    assert "code snapshot of" in info.message and "2 files" in info.message
    assert info.code is not None and info.code.digest[:12] in info.message
    assert not (client.home / "code" / "blobs").exists()
    assert not (client.home / "code" / "manifests").exists()


def test_plain_folder_without_git(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "model.py").write_text("VALUE = 7\n")
    (folder / "train.py").write_text(TRAIN)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    marker = tmp_path / "go"
    marker.touch()
    info = launch(client, folder, marker)
    assert info.code is not None and info.code.commit is None
    assert "git was not found" in (info.code.note or "")
    finished(client, info.job_id)
    assert "model says 7" in client.logs(info.job_id).text


# --- bad input: a clean error, and nothing left behind ---------------------------------------


def assert_nothing_left(client: Client) -> None:
    assert client.list().items == []
    jobs = client.home / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"patch": PATCH.replace("-VALUE = 1", "-VALUE = 9")}, "model.py, hunk 1"),
        ({"patch": "diff --git a/m b/m\nBinary files a/m and b/m differ\n"}, "binary"),
        ({"patch": PATCH.replace("a/model.py", "a/../x.py")}, "leaves the tree"),
        ({"patch": PATCH.replace("--- a/model.py", "--- /etc/passwd")}, "absolute"),
        ({"patch": ""}, "empty"),
        ({"patch": PATCH, "code": "live"}, "patch applies to a code snapshot"),
        ({"workdir": "/nonexistent/folder"}, "does not exist"),
    ],
)
def test_bad_input_is_refused_cleanly(
    client: Client, repo: Path, kw: dict[str, object], words: str
) -> None:
    with pytest.raises(AirError) as err:
        launch(client, repo, repo / "go", track=True, **kw)
    assert words in str(err.value)
    assert_nothing_left(client)
    assert (repo / "model.py").read_text() == "VALUE = 1\n"


def test_a_tree_over_the_limits_names_its_biggest_files(
    client: Client, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "weights.bin").write_bytes(b"0" * 300_000)
    monkeypatch.setenv("AIR_SNAPSHOT_MAX_MB", "0.1")
    with pytest.raises(AirError) as err:
        launch(client, repo, repo / "go")
    text = str(err.value)
    assert "weights.bin (0.3 MB)" in text and ".airignore" in text and "--code live" in text
    assert_nothing_left(client)
    monkeypatch.setenv("AIR_SNAPSHOT_MAX_FILES", "2")
    monkeypatch.delenv("AIR_SNAPSHOT_MAX_MB")
    (repo / ".airignore").write_text("weights.bin\n")
    with pytest.raises(AirError, match="3 files"):  # .airignore itself counts
        launch(client, repo, repo / "go")
    assert_nothing_left(client)


def test_a_symlink_out_of_the_tree_is_refused(client: Client, repo: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s")
    (repo / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(AirError, match="link is a symlink to .*outside the tree"):
        launch(client, repo, repo / "go")
    assert_nothing_left(client)
    (repo / "link").unlink()
    (repo / "inside").symlink_to("model.py")  # inside the tree: kept as a link in the view
    (repo.parent / "go").touch()
    info = launch(client, repo, repo.parent / "go")
    assert os.readlink(client.home / "jobs" / info.job_id / "code" / "inside") == "model.py"
