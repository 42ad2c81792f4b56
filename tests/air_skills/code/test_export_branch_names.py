"""Issue 30: `air code export --branch` refuses names git cannot use as a branch (HEAD, @, -D,
refs/heads/main made `refname 'HEAD' is ambiguous` ever after) with invalid-spec, before
anything is written: no ref, no folder. A real repository, real jobs, the real `air` CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from snapshot_repo import finished, git, launch, make_repo

from air_skills import Client
from air_skills.errors import InvalidSpec

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
BAD = ["HEAD", "@", "-D", "refs/heads/main", "@{-1}", "bad..name", "x.lock", "a b", "--help"]


@pytest.fixture
def job(client: Client, tmp_path: Path) -> tuple[str, Path]:
    repo = make_repo(tmp_path / "repo")
    info = launch(client, repo, Path("."))  # its marker: the folder it runs in, there at once
    finished(client, info.job_id)
    return info.job_id, repo


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname)")


def test_cli_refuses_branch_names_git_cannot_use(job: tuple[str, Path], tmp_path: Path) -> None:
    job_id, repo = job
    before = refs(repo)
    for name in BAD:
        dest = tmp_path / f"out-{len(name)}"
        proc = subprocess.run(
            [AIR, "code", "export", job_id, str(dest), "--branch", name, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=repo,
        )
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        error = json.loads(proc.stdout or proc.stderr)["error"]
        assert error["code"] == "invalid-spec", (name, error)
        assert "not a valid branch name" in error["message"] and error["hint"]
        assert not dest.exists(), name  # nothing written, not even the folder
    assert refs(repo) == before
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_python_api_refuses_and_a_plain_name_still_exports(
    client: Client, job: tuple[str, Path]
) -> None:
    job_id, repo = job
    with pytest.raises(InvalidSpec, match="not a valid branch name"):
        client.code.export(job_id, branch="HEAD")
    result = client.code.export(job_id, branch="air/ok-1")["branch"]
    assert git(repo, "rev-parse", "air/ok-1").strip() == result["commit"]
