"""A study started over MCP with its folder inside the code tree reads as running in every
get_study reply while its loop lives (issue 24: "interrupted" while it launched trials), and
its journal never enters a trial's snapshot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient

from air_skills import Client
from air_skills.runtime.process.proc import alive, start_time

pytestmark = pytest.mark.anyio
TRAIN = """\
import json, os, time
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
time.sleep(0.5)
print("---")
print("loss:", (c["x"] - 0.3) ** 2)
"""
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip


@pytest.mark.slow
async def test_a_study_in_the_tree_started_over_mcp_is_running_until_it_ends(
    tracked: str, server, client: Client, tmp_path: Path
) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env={**os.environ, **GIT_ENV})
    study = {
        "name": "live-mcp",
        "command": [sys.executable, "train.py"],
        "workdir": str(repo),
        "base_config": {"x": 0.0},
        "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 4, "concurrency": 2},
        "noise": {"repeats": 0},
        "gpus_per_trial": 0,
        "proposer": "random",
    }
    folder = repo / "studies" / "live-mcp"
    async with McpClient(server) as mcp:
        started = await mcp.call_tool("start_study", {"study": study, "study_dir": str(folder)})
        assert not started.is_error, started.content[0].text
        pid = started.structured_content["pid"]
        start = start_time(pid)
        replies = 0
        for _ in range(2000):
            reply = await mcp.call_tool("get_study", {"study": "live-mcp"})
            state = reply.structured_content["state"]
            if not alive(pid, start) or state == "finished":
                break
            assert state == "running", f"reply {replies}: {state} while the loop runs"
            replies += 1
            await mcp.call_tool("wait_for_study", {"study": "live-mcp", "timeout_s": 1})
        assert replies >= 2
    jobs = [j for j in client.list(limit=20).items]
    assert jobs and all(j.code is not None for j in jobs)
    for job in jobs:  # the journal beside the code never went into a trial's snapshot
        files = client.code.job_code(job.job_id).manifest["files"]
        assert not [f for f in files if f.startswith("studies/")], sorted(files)
