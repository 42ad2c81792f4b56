"""export_code through a real MCP client: a job's or a study's best code as a clean diff, or
a commit on a new branch; never the study's own files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient

from mcp_server.tools.code import clean_diff

pytestmark = pytest.mark.anyio
TRAIN = """\
import json, os
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("---")
print("loss:", c["x"] ** 2)
"""
PATCH = """\
--- a/train.py
+++ b/train.py
@@ -1,2 +1,3 @@
 import json, os
+# tuned
 c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
"""
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip


def _repo(root: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root.mkdir()
    (root / "train.py").write_text(TRAIN)
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env)
    return root


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


async def test_a_jobs_code_as_a_diff_and_as_a_branch(server, tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    async with McpClient(server) as mcp:
        job = await mcp.call_tool(
            "launch_job",
            {
                "command": [sys.executable, "train.py"],
                "workdir": str(repo),
                "patch": PATCH,
                "config": {"x": 2},
                "track": False,
            },
        )
        job_id = job.structured_content["job_id"]
        got = await mcp.call_tool("export_code", {"job_id": job_id})
        assert not got.is_error, got.content[0].text
        assert "+# tuned" in got.structured_content["diff"]
        made = await mcp.call_tool("export_code", {"job_id": job_id, "branch": "air/tuned"})
        commit = made.structured_content["commit"]
        assert _git(repo, "rev-parse", "air/tuned").strip() == commit
        assert "# tuned" in _git(repo, "show", "air/tuned:train.py")
        assert _git(repo, "status", "--porcelain") == ""  # the tree and its branch untouched
        both = await mcp.call_tool("export_code", {})
        assert both.is_error and "give job_id or study" in both.content[0].text


async def test_a_study_best_code_without_the_study_files(
    tracked: str, server, tmp_path: Path
) -> None:
    repo = _repo(tmp_path / "repo")
    study = {
        "name": "export-me",
        "command": ["python", "train.py"],
        "workdir": str(repo),
        "base_config": {"x": 1.0},
        "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 3, "concurrency": 1},
        "noise": {"repeats": 0},
        "gpus_per_trial": 0,
        "proposer": "random",
    }
    folder = repo / "studies" / "export-me"  # inside the tree: its files must not come out
    async with McpClient(server) as mcp:
        started = await mcp.call_tool("start_study", {"study": study, "study_dir": str(folder)})
        assert not started.is_error, started.content[0].text
        for _ in range(20):
            state = await mcp.call_tool("wait_for_study", {"study": "export-me", "timeout_s": 30})
            if state.structured_content["state"] != "running":
                break
        got = await mcp.call_tool("export_code", {"study": "export-me"})
        assert not got.is_error, got.content[0].text
        reply = got.structured_content
        assert reply["trial"] == state.structured_content["best"]["trial"]
        assert "journal.jsonl" not in (reply.get("diff") or "")


def test_clean_diff_drops_a_study_folders_files() -> None:
    patch = (
        "# job x\n--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-a\n+b\n"
        "--- /dev/null\n+++ b/studies/s/journal.jsonl\n@@ -0,0 +1 @@\n+{}\n"
        "--- /dev/null\n+++ b/studies/s/.loop.lock\n@@ -0,0 +0,0 @@\n"
    )
    assert clean_diff(patch) == "# job x\n--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-a\n+b\n"
