"""MCP and code snapshots: compare_jobs gives the code difference, a resource the full patch."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client as McpClient
from snapshot_repo import PATCH, finished, launch, make_repo

from air_skills import Client
from mcp_server import tools

pytestmark = pytest.mark.anyio


def test_compare_jobs_gives_the_code_difference_in_short(client: Client, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "go"
    marker.touch()
    a = launch(client, repo, marker)
    b = launch(client, repo, marker, patch=PATCH)
    reply = tools.compare_jobs(client, [a.job_id, b.job_id])
    assert reply.rows[0].code is None
    assert reply.rows[1].code == "1 file (+1 -1): model.py +1 -1"


async def test_the_code_patch_resource(server, client: Client, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "go"
    marker.touch()
    info = launch(client, repo, marker, patch=PATCH)
    finished(client, info.job_id)
    async with McpClient(server) as mcp:
        got = await mcp.read_resource(f"air://jobs/{info.job_id}/code.patch")
        text = got.contents[0].text  # type: ignore[union-attr]
        assert "-VALUE = 1\n+VALUE = 42\n" in text and info.code.commit in text
        with pytest.raises(Exception, match="not-found"):
            await mcp.read_resource("air://jobs/job-0000000000/code.patch")
