"""Replies that say it all (issue 24): a dry run checks the patch and gives its whole message;
get_job says a job is patched; list_jobs says "2 of 3 jobs" and gives the cursor in its text."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient

pytestmark = pytest.mark.anyio
PATCH = "--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-print(1)\n+print(2)\n"


def _deep(tmp_path: Path) -> Path:
    work = tmp_path / ("a-long-folder-name-" * 6) / ("another-long-one-" * 6)
    work.mkdir(parents=True)
    (work / "t.py").write_text("print(1)\n")
    return work


async def test_dry_run_checks_the_patch_and_says_everything(server, tmp_path: Path) -> None:
    work = _deep(tmp_path)
    args = {"command": [sys.executable, "t.py"], "workdir": str(work), "dry_run": True}
    async with McpClient(server) as mcp:
        dry = await mcp.call_tool("launch_job", {**args, "patch": PATCH})
        text = dry.content[0].text
        assert not dry.is_error and str(work) in text and "nothing was launched" in text
        bad = await mcp.call_tool("launch_job", {**args, "patch": PATCH.replace("-print(1)", "-x")})
        assert bad.is_error and "patch refused" in bad.content[0].text


async def test_get_job_says_patched_and_list_jobs_counts_pages(server, tmp_path: Path) -> None:
    work = _deep(tmp_path)
    base = {"command": [sys.executable, "t.py"], "workdir": str(work), "track": False}
    async with McpClient(server) as mcp:
        ids = []
        for n in range(3):
            extra = {"patch": PATCH} if n == 0 else {"config": {"n": n}}
            job = await mcp.call_tool("launch_job", {**base, **extra})
            ids.append(job.structured_content["job_id"])
        got = await mcp.call_tool("get_job", {"job_id": ids[0]})
        assert "(patched)" in got.content[0].text
        plain = await mcp.call_tool("get_job", {"job_id": ids[1]})
        assert "code: snapshot" in plain.content[0].text
        assert "(patched)" not in plain.content[0].text
        page = await mcp.call_tool("list_jobs", {"limit": 2})
        reply, text = page.structured_content, page.content[0].text
        assert reply["total"] == 3 and text.startswith("2 of 3 jobs")
        assert f"cursor={reply['next_cursor']}" in text
