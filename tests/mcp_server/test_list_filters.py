"""list_jobs's config and study filters (issue 41): a leaderboard of the jobs with one config
value, or of one study's trials, over the MCP SDK client, with seed groups over all of them."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from mcp import Client as McpClient

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.store.results_index import STUDY_TAG

pytestmark = pytest.mark.anyio
PY = sys.executable
JOB = (  # the loss from the config: seeds of one config run the same command
    "import json, os; c = json.load(open(os.environ['AIR_CONFIG_FILE']))\n"
    "print('---'); print('loss:', c['lr'] + c['seed'] / 100)"
)


async def listed(mcp: McpClient, **args: Any) -> dict[str, Any]:
    result = await mcp.call_tool("list_jobs", args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    assert result.structured_content is not None
    return result.structured_content


async def test_list_jobs_filters_a_leaderboard_by_config_and_study(
    tracked: str, server, client: Client
) -> None:
    runs = [(0.1, 0, None), (0.1, 1, "s1"), (0.2, 0, "s1"), (0.3, 0, None), (0.3, 1, None)]
    ids = []
    for lr, seed, study in runs:  # lr, seed, the study it is a trial of
        tags = {STUDY_TAG: study} if study else {}
        spec = JobSpec(command=[PY, "-c", JOB], config={"lr": lr, "seed": seed}, tags=tags)
        ids.append(client.launch(spec).job_id)
    done = client.wait(ids, timeout_s=240, any=False)
    assert all(i.status == JobStatus.SUCCEEDED for i in done), [i.message for i in done]
    async with McpClient(server) as mcp:
        board = dict(metric="loss", order_by="best")
        by_lr = await listed(mcp, **board, config={"lr": 0.3}, group_by="seed")
        assert [j["job_id"] for j in by_lr["items"]] == [ids[3], ids[4]]
        assert [g["n"] for g in by_lr["groups"]] == [2]  # both seeds of lr=0.3, one group
        by_study = await listed(mcp, **board, study="s1")
        assert [j["job_id"] for j in by_study["items"]] == [ids[1], ids[2]]
        both = await listed(mcp, **board, study="s1", config={"lr": 0.1})
        assert [j["job_id"] for j in both["items"]] == [ids[1]]
        refused = await mcp.call_tool("list_jobs", {"config": {"lr": 0.1}})
        assert refused.is_error and "metric" in refused.content[0].text  # type: ignore[union-attr]
