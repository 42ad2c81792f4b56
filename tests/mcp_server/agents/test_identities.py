"""Many agents on one pool (issue 29): identities over real HTTP, quotas that hold, who
launched what; the refusals each tested; tokens never in logs, ps or error texts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from air_skills import Client, JobSpec

PY = sys.executable
HOLD = "import time; time.sleep(300)"
pytestmark = pytest.mark.anyio


def over_http(url: str, token: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return McpClient(streamable_http_client(url, http_client=http))


@pytest.fixture
def pool(client: Client, spawn_air_mcp: Callable[..., Any]) -> dict[str, Any]:
    """air-mcp over HTTP with two identities: alice (nlp, 2 GPUs, normal at most), bob (vision)."""
    tokens = {
        "alice": client.add_identity("alice", "nlp", max_gpus=2, priority_max="normal"),
        "bob": client.add_identity("bob", "vision"),
        "root": client.add_identity("root-agent", "ops", admin=True),
    }
    sp = spawn_air_mcp(["--transport", "http", "--port", "0", "--log-level", "DEBUG"])
    return {"url": sp.url(), "tokens": tokens, "server": sp}


async def launch(mcp: McpClient, **args: Any) -> Any:
    return await mcp.call_tool("launch_job", {"command": [PY, "-c", HOLD], "track": False, **args})


async def test_each_identity_launches_only_in_its_project_and_within_its_limits(
    pool: dict[str, Any], client: Client
) -> None:
    async with over_http(pool["url"], pool["tokens"]["alice"]) as alice:
        first = await launch(alice, gpus=2)
        assert not first.is_error, first.content
        job = client.get(first.structured_content["job_id"])
        assert job.project == "nlp" and job.launched_by == "alice"
        other = await launch(alice, gpus=1, advanced={"project": "vision"})
        assert other.is_error and "[forbidden]" in other.content[0].text
        assert "only in project 'nlp'" in other.content[0].text
        over = await launch(alice, gpus=1)  # 2 held + 1 > max_gpus 2
        assert over.is_error and "at most 2 GPUs" in over.content[0].text
        high = await launch(alice, gpus=0, priority="high")
        assert high.is_error and "priority 'normal'" in high.content[0].text
    async with over_http(pool["url"], pool["tokens"]["bob"]) as bob:
        theirs = await bob.call_tool("cancel_job", {"job_id": job.job_id})
        assert theirs.is_error and "cancels only its own jobs" in theirs.content[0].text
        own = await launch(bob, gpus=1)
        assert client.get(own.structured_content["job_id"]).launched_by == "bob"
    async with over_http(pool["url"], pool["tokens"]["root"]) as admin:
        stopped = await admin.call_tool("cancel_job", {"job_id": job.job_id})
        assert not stopped.is_error, stopped.content
    assert [j.job_id for j in client.list(launched_by="alice").items] == [job.job_id]
    for token in pool["tokens"].values():  # never in the server's log
        assert token not in pool["server"].stderr


async def test_a_revoked_token_is_refused_at_once(pool: dict[str, Any], client: Client) -> None:
    async with over_http(pool["url"], pool["tokens"]["bob"]) as bob:
        assert not (await bob.call_tool("list_gpus", {})).is_error
    client.revoke_identity("bob")
    http = httpx2.AsyncClient(timeout=30)
    async with http:
        reply = await http.post(
            pool["url"],
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={
                "Authorization": f"Bearer {pool['tokens']['bob']}",
                "Accept": "application/json, text/event-stream",
            },
        )
    assert reply.status_code == 401
    assert pool["tokens"]["bob"] not in reply.text


def test_the_gpu_limit_holds_when_launches_race(client: Client) -> None:
    """Checked in the queueing transaction: of eight launches at once, at most max_gpus pass."""
    from concurrent.futures import ThreadPoolExecutor

    from air_skills.runtime.store.identities import Forbidden, Identity

    client.add_identity("carol", "nlp", max_gpus=2, unsandboxed=True)  # code: live is its right
    carol = client.as_identity(Identity("carol", "nlp", max_gpus=2, unsandboxed=True))
    spec = JobSpec(command=[PY, "-c", HOLD], gpus=1, track=False, code="live")

    def one(n: int) -> str:
        try:  # eight experiments (one the same eight times would be refused as duplicates)
            return carol.launch(spec.model_copy(update={"config": {"n": n}})).job_id
        except Forbidden:
            return "refused"

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert sum(r != "refused" for r in results) == 2, results


def test_cli_tokens_are_shown_once_and_stored_hashed(air_home, client: Client) -> None:
    env = {**os.environ, "AIR_HOME": str(air_home)}
    air = [PY, "-m", "air_skills.cli"]
    made = subprocess.run(
        [*air, "mcp-token", "add", "dana", "--project", "nlp", "--max-gpus", "1", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    import json

    token = json.loads(made.stdout)["token"]
    listed = subprocess.run(
        [*air, "mcp-token", "ls", "--json"], capture_output=True, text=True, env=env, check=True
    )
    assert token not in listed.stdout and '"dana"' in listed.stdout
    assert token.encode() not in (air_home / "air.db").read_bytes()
    assert client.identity_for_token(token).name == "dana"
    subprocess.run([*air, "mcp-token", "revoke", "dana"], env=env, check=True, capture_output=True)
    assert client.identity_for_token(token) is None
