"""Rerun, diff, export and gc of code snapshots: real git repositories, real jobs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from snapshot_repo import PATCH, PY, finished, git, launch, make_repo
from typer.testing import CliRunner

from air_skills import Client
from air_skills.cli.app import app
from air_skills.errors import AirError
from air_skills.runtime.code.code_gc import collect

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def air(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_rerun_runs_the_stored_snapshot_not_the_tree(client: Client, repo: Path) -> None:
    marker = repo.parent / "go"
    marker.touch()
    first = launch(client, repo, marker, config={"lr": 0.1})
    finished(client, first.job_id)
    (repo / "model.py").write_text("VALUE = 2\n")  # the tree moves on
    again = client.rerun(first.job_id, config={"lr": 0.2})
    assert again.code is not None and again.code.digest == first.code.digest
    assert again.code.commit == first.code.commit and "rerun of" in (again.code.note or "")
    assert finished(client, again.job_id).status == "SUCCEEDED"
    assert "model says 1" in client.logs(again.job_id).text
    spec = client.store.row(again.job_id).spec_dict()
    assert spec["config"] == {"lr": 0.2} and spec["tags"]["air.rerun_of"] == first.job_id


def test_rerun_with_a_patch_on_the_same_base(client: Client, repo: Path) -> None:
    marker = repo.parent / "go"
    marker.touch()
    first = launch(client, repo, marker)
    finished(client, first.job_id)
    (repo / "model.py").write_text("VALUE = 2\n")
    out = air("rerun", first.job_id, "--patch", str(_write(repo.parent / "p.diff", PATCH)))
    job_id = out.split()[0]
    info = finished(client, job_id)
    assert info.code.patched and info.code.digest == first.code.digest
    assert "model says 42" in client.logs(job_id).text
    assert (repo / "model.py").read_text() == "VALUE = 2\n"  # the tree is never touched


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_diff_shows_the_config_and_code_change(client: Client, repo: Path) -> None:
    marker = repo.parent / "go"
    marker.touch()
    a = launch(client, repo, marker, config={"lr": 0.1})
    b = launch(client, repo, marker, config={"lr": 0.3}, patch=PATCH)
    result = client.code.diff(a.job_id, b.job_id)
    assert result["config"] == {"lr": {"a": 0.1, "b": 0.3}}
    files = result["code"]["files"]
    assert files == [{"path": "model.py", "status": "modified", "added": 1, "removed": 1}]
    assert "-VALUE = 1\n+VALUE = 42\n" in result["code"]["diff"]
    assert client.code.short_diff(a.job_id, b.job_id) == "1 file (+1 -1): model.py +1 -1"
    text = air("diff", a.job_id, b.job_id)
    assert "config lr: 0.1 -> 0.3" in text and "modified model.py  +1 -1" in text
    assert json.loads(air("diff", a.job_id, a.job_id, "--json"))["code"]["same"]


def test_the_patch_against_the_base_commit(client: Client, repo: Path) -> None:
    (repo / "new.py").write_text("X = 1\n")  # untracked: in the snapshot, not in the commit
    marker = repo.parent / "go"
    marker.touch()
    info = launch(client, repo, marker, patch=PATCH)
    patch = client.code.patch(info.job_id)
    assert "+VALUE = 42" in patch and "+++ b/new.py" in patch and "train.py" not in patch


def test_export_writes_the_code_as_launched(client: Client, repo: Path) -> None:
    marker = repo.parent / "go"
    marker.touch()
    info = launch(client, repo, marker, patch=PATCH)
    finished(client, info.job_id)
    (client.home / "jobs" / info.job_id / "code" / "model.py").write_text("wrecked\n")
    dest = repo.parent / "exported"
    air("code", "export", info.job_id, str(dest))
    assert (dest / "model.py").read_text() == "VALUE = 42\n"
    assert sorted(p.name for p in dest.iterdir()) == ["model.py", "train.py"]
    with pytest.raises(AirError, match="not an empty folder"):
        client.code.export(info.job_id, dest)


def test_export_makes_a_branch_without_touching_the_checkout(client: Client, repo: Path) -> None:
    (repo / "model.py").write_text("VALUE = 7\n")  # dirty, and stays so
    marker = repo.parent / "go"
    marker.touch()
    info = launch(client, repo, marker, patch=PATCH.replace("VALUE = 1", "VALUE = 7"))
    head = git(repo, "rev-parse", "HEAD").strip()
    status = git(repo, "status", "--porcelain")
    result = client.code.export(info.job_id, branch="air/exp")["branch"]
    assert result["parent"] == head
    assert git(repo, "show", "air/exp:model.py") == "VALUE = 42\n"
    assert git(repo, "rev-parse", "air/exp^").strip() == head
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "status", "--porcelain") == status
    assert (repo / "model.py").read_text() == "VALUE = 7\n"
    with pytest.raises(AirError, match="already exists"):
        client.code.export(info.job_id, branch="air/exp")
    with pytest.raises(AirError, match="not a valid branch name"):
        client.code.export(info.job_id, branch="bad..name")


def test_gc_keeps_what_running_jobs_use(client: Client, repo: Path) -> None:
    go = repo.parent / "go"
    go.touch()
    old = launch(client, repo, go)
    finished(client, old.job_id)
    (repo / "model.py").write_text("VALUE = 2\n")
    wait = repo.parent / "later"
    running = launch(client, repo, wait)  # waits on its marker: running through the gc
    assert running.code.digest != old.code.digest
    blobs = client.home / "code" / "blobs"
    count = len(list(blobs.glob("*/*")))
    later = time.time() + 40 * 86400  # past the 30-day window (and the grace period)
    dry = collect(client.home, dry_run=True, now=later)
    assert dry["manifests_removed"] == 1 and dry["blobs_removed"] == 1
    assert len(list(blobs.glob("*/*"))) == count  # a dry run removes nothing
    report = collect(client.home, now=later)
    assert report["blobs_removed"] == 1 and report["views_removed"] == 1
    assert len(list(blobs.glob("*/*"))) == count - 1  # old model.py; train.py is shared
    assert not (client.home / "jobs" / old.job_id / "code").exists()
    assert (client.home / "jobs" / running.job_id / "code" / "model.py").exists()
    wait.touch()
    assert finished(client, running.job_id).status == "SUCCEEDED"
    assert "model says 2" in client.logs(running.job_id).text
    client.rerun(running.job_id)  # its snapshot is whole
    with pytest.raises(AirError, match="no longer stored"):
        client.rerun(old.job_id)
    report = json.loads(air("gc", "--dry-run", "--json"))
    assert report["dry_run"] and report["manifests_removed"] == 0


def test_rerun_of_a_live_job_is_refused(client: Client, repo: Path) -> None:
    info = client.launch({"command": [PY, "-c", "pass"], "workdir": str(repo), "code": "live"})
    with pytest.raises(AirError, match="no code snapshot"):
        client.rerun(info.job_id)


def test_rerun_dry_run_refuses_a_snapshot_whose_command_would_not_start(
    client: Client, repo: Path
) -> None:
    # A launch refuses it too: this one is let through, to be rerun.
    spec = {"command": [PY, "trian.py"], "workdir": str(repo), "track": False}
    bad = client.launch({**spec, "check_command": False})
    finished(client, bad.job_id)
    result = CliRunner().invoke(app, ["rerun", bad.job_id, "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "[invalid-spec]" in result.output and "trian.py" in result.output
    before = len(client.list().items)
    marker = repo.parent / "go"
    marker.touch()
    good = launch(client, repo, marker)
    finished(client, good.job_id)
    assert "WOULD NOT START" not in air("rerun", good.job_id, "--dry-run")
    assert len(client.list().items) == before + 1  # a dry run queues nothing
