"""Issue 39 over the MCP SDK's stdio client (a real `air-mcp` process): variants x seeds in one
call with a batch id, a diverged seed in a group (MLflow's float-max clamp) that no grouped
reply raises on or shows as a number, an idempotency key inside a repeated spec, true counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp_calls import ok, text_of

pytestmark = pytest.mark.anyio
PY = sys.executable
TRAIN = """\
import json, os
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
v = c["lr"] * 10 + c["seed"] * 0.01
if c["lr"] == 1.0 and c["seed"] == 1:
    v = 1.7976931348623157e308  # what MLflow stores for an inf: float max
print("---")
print("val_mse:", repr(v))
"""


async def test_variants_x_seeds_a_diverged_seed_and_a_batch_over_stdio(
    stdio: StdioServerParameters, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    base = {
        "command": [PY, "train.py"],
        "workdir": str(tmp_path),
        "config": {"lr": 0.1},
        "idempotency_key": "round-1",  # inside the spec that seeds repeat: KEY#n per item
    }
    call = {"jobs": [base], "variants": [{}, {"config": {"lr": 1.0}}], "seeds": [0, 1, 2]}
    async with McpClient(stdio) as mcp:
        launched, text = await ok(mcp, "launch_jobs", **call)
        jobs = launched["jobs"]
        assert [j["name"] for j in jobs] == [
            f"lr={lr} seed={s}" for lr in ("0.1", "1") for s in (0, 1, 2)
        ]
        batch = launched["batch_id"]
        assert text.startswith(f"6 launched; batch_id {batch}")
        ids = [j["job_id"] for j in jobs]

        waited, text = await ok(
            mcp,
            "wait_for_jobs",
            job_ids=[batch],
            mode="all",
            timeout_s=240,
            metric="val_mse",
            group_by="seed",
        )
        assert waited["done"]
        good, bad = waited["groups"]
        assert good["config"] == {"lr": 0.1} and good["n"] == 3
        assert bad["n"] == 2 and bad["diverged"] == 1 and "inf" in bad["values"]
        assert "1 of 3 diverged" in text and "e+308" not in text

        listed, text = await ok(
            mcp, "list_jobs", batch_id=batch, metric="val_mse", group_by="seed", limit=2
        )
        assert listed["total"] == 6 and listed["next_cursor"] == "2"
        assert [g["n"] for g in listed["groups"]] == [3, 2]  # over the batch, not the page
        assert "e+308" not in text

        board, text = await ok(
            mcp, "list_jobs", batch_id=batch, metric="val_mse", order_by="latest", limit=6
        )
        assert board["items"][-1]["job_id"] == ids[4]  # the diverged run ranks last
        assert board["items"][-1]["score"]["diverged"] is True
        assert "latest inf" in text and "diverged" in text

        compared, text = await ok(
            mcp, "compare_jobs", job_ids=ids, metric="val_mse", group_by="seed"
        )
        assert compared["rows"][4]["latest"] == "inf" and "e+308" not in text
        metrics, text = await ok(mcp, "get_metrics", job_id=ids[4], history=True)
        assert metrics["latest"]["val_mse"] == "inf" and "e+308" not in json.dumps(metrics)

        # The same call again: every item is the job its key holds; the count says so.
        again, text = await ok(mcp, "launch_jobs", **call)
        assert [j["job_id"] for j in again["jobs"]] == ids
        assert text.startswith("0 launched, 6 already launched with their key")

        cancelled, text = await ok(mcp, "cancel_job", job_id=batch)
        assert cancelled["job_id"] == batch and "6 SUCCEEDED" in cancelled["message"]


async def test_a_batch_is_all_or_nothing_with_keys(server, tmp_path: Path) -> None:
    """39.2: a key used by another spec refuses the call before any item is queued."""
    (tmp_path / "train.py").write_text(TRAIN)
    spec = {"command": [PY, "train.py"], "workdir": str(tmp_path), "config": {"lr": 0.1}}
    async with McpClient(server) as mcp:
        await ok(
            mcp, "launch_job", **{**spec, "config": {"lr": 0.5, "seed": 0}}, idempotency_key="k#1"
        )
        refused = await mcp.call_tool(
            "launch_jobs", {"jobs": [spec], "seeds": [0, 1, 2], "idempotency_key": "k"}
        )
        assert refused.is_error
        text = text_of(refused)
        assert "1 of 3 job(s) refused; nothing was launched" in text
        assert "item 1: [idempotency-conflict]" in text
        twice = await mcp.call_tool(
            "launch_jobs",
            {
                "jobs": [
                    {**spec, "idempotency_key": "x"},
                    {**spec, "config": {"lr": 2}, "idempotency_key": "x"},
                ]
            },
        )
        assert twice.is_error and "is also item 0's" in text_of(twice)
        listed, _ = await ok(mcp, "list_jobs")
        assert len(listed["items"]) == 1  # only the launch_job above


async def test_get_metrics_on_a_running_job_without_points_says_so(
    server, client, tracked: str
) -> None:
    """39.8: get_metrics on a job that has logged nothing yet gives its status, not empty maps."""
    from helpers import wait_until

    async with McpClient(server) as mcp:
        job, _ = await ok(
            mcp, "launch_job", command=[sys.executable, "-c", "import time; time.sleep(120)"]
        )
        wait_until(lambda: client.get(job["job_id"]).run_id, timeout_s=60)
        metrics, text = await ok(mcp, "get_metrics", job_id=job["job_id"])
        assert metrics["latest"] == {} and metrics["status"] in ("QUEUED", "RUNNING")
        assert "no metric logged yet" in metrics["note"]
        await ok(mcp, "cancel_job", job_id=job["job_id"])
