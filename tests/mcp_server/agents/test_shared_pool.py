"""Four agents on one pool (issue 29), each a real MCP client over HTTP with its own token:
overlapping configs run once each (the others get [duplicate] naming the job), and every
agent sees the others' results on the shared board, with who launched each."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from air_skills import Client

pytestmark = pytest.mark.anyio
TRAIN = """
import json, os
config = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("---")
print(f"val_loss: {config['lr'] * 10}")
"""
LRS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
AGENTS = 4


def over_http(url: str, token: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return McpClient(streamable_http_client(url, http_client=http))


async def test_four_agents_with_overlapping_configs_run_each_once_and_share_a_board(
    client: Client, spawn_air_mcp: Callable[..., Any], tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    tokens = {f"agent-{n}": client.add_identity(f"agent-{n}", "lab") for n in range(AGENTS)}
    url = spawn_air_mcp(["--transport", "http", "--port", "0"]).url()
    wanted = {name: LRS[n : n + 3] for n, name in enumerate(tokens)}  # 12 asks, 6 configs
    replies: dict[str, list[Any]] = {name: [] for name in tokens}

    async def agent(name: str) -> None:
        async with over_http(url, tokens[name]) as mcp:
            for lr in wanted[name]:
                args = {"command": [sys.executable, "train.py"], "workdir": str(tmp_path)}
                reply = await mcp.call_tool("launch_job", {**args, "config": {"lr": lr}})
                replies[name].append((lr, reply))

    async with anyio.create_task_group() as tg:
        for name in tokens:
            tg.start_soon(agent, name)

    jobs = client.list(limit=100).items
    assert len(jobs) == len(LRS)  # jobs run == distinct configs
    by_lr = {client.store.row(j.job_id).spec_dict()["config"]["lr"]: j for j in jobs}
    assert sorted(by_lr) == LRS
    for name, got in replies.items():
        for lr, reply in got:
            if reply.is_error:  # told which job runs it, and who launched that one
                text = reply.content[0].text
                assert text.startswith("[duplicate]") and by_lr[lr].job_id in text, text
                assert f"launched by {by_lr[lr].launched_by}" in text
                assert by_lr[lr].launched_by != name  # an agent asks each config once
            else:
                assert reply.structured_content["job_id"] == by_lr[lr].job_id
    assert sum(r.is_error for got in replies.values() for _, r in got) == 12 - len(LRS)
    done = client.wait([j.job_id for j in jobs], timeout_s=600, any=False)
    assert all(j.status.value == "SUCCEEDED" for j in done), done

    async with over_http(url, tokens["agent-3"]) as mcp:  # the last agent sees everyone's runs
        board = await mcp.call_tool(
            "list_jobs", {"order_by": "best", "metric": "val_loss", "limit": 10}
        )
        items = board.structured_content["items"]
        assert [i["job_id"] for i in items] == [by_lr[lr].job_id for lr in LRS]
        assert {i["launched_by"] for i in items} == {j.launched_by for j in jobs}
        assert f" by {items[0]['launched_by']} " in board.content[0].text
        again = await mcp.call_tool(
            "launch_job",
            {
                "command": [sys.executable, "train.py"],
                "workdir": str(tmp_path),
                "config": {"lr": 0.1},
            },
        )
        assert again.is_error and by_lr[0.1].job_id in again.content[0].text
        job = await mcp.call_tool("get_job", {"job_id": by_lr[0.1].job_id})
        who = by_lr[0.1].launched_by
        assert job.structured_content["launched_by"] == who
        assert f"launched by {who}" in job.content[0].text
        assert "SUCCEEDED" in again.content[0].text and "val_loss=1" in again.content[0].text
