"""One research round over MCP (issue 18): launch, wait with a metric, leaderboard, compare at a
step, grep a long log, cancel; and the texts that carry the facts."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from mcp import Client as McpClient

from air_skills import Client

PY = sys.executable
pytestmark = pytest.mark.anyio
# Prints a long log with one val_loss line in the middle, then a summary block (its metric).
JOB = (
    "import sys\n"
    "for i in range(40000): print(f'step {i} train_loss {3 - i / 40000:.4f}')\n"
    "print('val_loss: ' + sys.argv[1])\n"
    "print('---'); print('val_loss: ' + sys.argv[1])\n"
)


async def ok(mcp: McpClient, tool: str, **args: Any) -> tuple[dict[str, Any], str]:
    result = await mcp.call_tool(tool, args)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    return result.structured_content or {}, text


async def test_a_round_is_wait_then_decide(tracked: str, server, client: Client) -> None:
    from mlflow.entities import Metric

    async with McpClient(server) as mcp:
        ids = []
        for value, lr in (("2.0", 0.1), ("1.5", 0.2), ("1.8", 0.3)):
            job, text = await ok(
                mcp,
                "launch_job",
                command=[PY, "-c", JOB, value],
                gpus=1,
                config={"lr": lr},
                experiment="round",
            )
            assert job["job_id"] in text and "next:" in text
            ids.append(job["job_id"])
        waited, text = await ok(
            mcp, "wait_for_jobs", job_ids=ids, timeout_s=120, mode="all", metric="val_loss"
        )
        assert waited["done"] and all(j["score"]["latest"] for j in waited["jobs"])
        assert "val_loss best 1.5@" in text
        # curves with steps, logged into the jobs' runs: compare at equal steps
        for n, job_id in enumerate(ids):
            run_id = client.get(job_id).run_id
            curve = [Metric("curve", 10.0 - s / 100 - n, 0, s) for s in range(0, 500, 50)]
            client.tracker.client.log_batch(run_id, metrics=curve)
        board, text = await ok(
            mcp, "list_jobs", metric="val_loss", order_by="best", experiment="round"
        )
        assert [j["job_id"] for j in board["items"]] == [ids[1], ids[2], ids[0]]
        assert text.splitlines()[1].startswith(ids[1])
        compared, text = await ok(mcp, "compare_jobs", job_ids=ids, metric="curve", at_step=220)
        assert [r["at_step"]["step"] for r in compared["rows"]] == [200, 200, 200]
        assert compared["rows"][1]["diff"] == {"lr": 0.2} and "at step 200" in text
        missing = await mcp.call_tool("compare_jobs", {"job_ids": ids, "metric": "nope"})
        assert missing.is_error and "[unknown-metric]" in missing.content[0].text  # type: ignore[union-attr]
        found, text = await ok(mcp, "get_logs", job_id=ids[0], grep=r"^val_loss")
        assert found["total_matches"] == 2 and found["matches"][0]["line"] == 40_001
        assert "line 40001 @byte" in text
        last, _ = await ok(
            mcp, "get_logs", job_id=ids[0], grep="train_loss", last_match=True, tail=1
        )
        assert last["matches"][0]["text"].startswith("step 39999")
        got, text = await ok(mcp, "get_job", job_id=ids[1], metric="val_loss")
        assert "SUCCEEDED" in text and "config: lr=0.2" in text and got["run_id"] in text
        assert len(text) <= 1_000


async def test_a_string_command_and_a_misspelt_argument_are_explained(server) -> None:
    async with McpClient(server) as mcp:
        bad = await mcp.call_tool("launch_job", {"command": ["true"], "gpu": 1})
        text = bad.content[0].text  # type: ignore[union-attr]
        assert bad.is_error and "gpu: unknown field; did you mean gpus?" in text
