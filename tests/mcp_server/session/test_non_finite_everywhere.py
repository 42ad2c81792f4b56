"""39.1, a table for every reply that shows a value: inf, -inf, nan, MLflow's float-max clamp
and 1.79e308 (a finite number near it) logged to a real MLflow run of a real job, then read
through list_jobs (seed groups and a leaderboard), wait_for_jobs, compare_jobs and get_metrics:
no call raises, no non-finite value reads as a number, a diverged run is counted."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient
from mcp_calls import ok

pytestmark = pytest.mark.anyio
MAX = sys.float_info.max
# value logged for seed 1 of config k, and how replies must show it
TABLE = [(math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan"), (MAX, "inf"), (1.79e308, None)]
TRAIN = """\
import json, math, os
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("---")
print("val:", 0.5 + c["k"] / 10 + c["seed"] / 100)
if c["seed"] == 1:  # this run diverges: its last value, logged as a script would log it
    from mlflow.tracking import MlflowClient
    value = [math.inf, -math.inf, math.nan, 1.7976931348623157e308, 1.79e308][c["k"]]
    MlflowClient().log_metric(os.environ["MLFLOW_RUN_ID"], "val", value, step=100)
"""


async def test_non_finite_values_through_every_reply(
    server, client, tracked: str, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    base = {"command": [sys.executable, "train.py"], "workdir": str(tmp_path), "config": {"k": 0}}
    variants = [{"config": {"k": k}} for k in range(len(TABLE))]
    async with McpClient(server) as mcp:
        launched, _ = await ok(mcp, "launch_jobs", jobs=[base], variants=variants, seeds=[0, 1, 2])
        ids = [j["job_id"] for j in launched["jobs"]]
        waited, _ = await ok(
            mcp, "wait_for_jobs", job_ids=[launched["batch_id"]], mode="all", timeout_s=300
        )
        assert waited["done"]
        calls = [
            ("list_jobs", {"metric": "val", "group_by": "seed", "limit": 100}),
            ("list_jobs", {"metric": "val", "order_by": "latest", "limit": 100}),
            ("list_jobs", {"batch_id": launched["batch_id"], "metric": "val", "order_by": "best"}),
            (
                "wait_for_jobs",
                {"job_ids": ids[:15], "metric": "val", "group_by": "seed", "mode": "all"},
            ),
            ("compare_jobs", {"job_ids": ids[:15], "metric": "val", "group_by": "seed"}),
        ]
        texts = {}
        for tool, args in calls:
            reply, text = await ok(mcp, tool, **args)
            assert "1.7977e+308" not in text and "Infinity" not in text, (tool, text)
            texts[tool + str(len(texts))] = (reply, text)
        groups = texts["list_jobs0"][0]["groups"]
        for k, (_value, shown) in enumerate(TABLE):
            (group,) = [g for g in groups if ids[3 * k] in g["members"]]
            if shown is None:  # 1.79e308 is a (huge) finite number: a value, counted
                assert group["n"] == 3 and group["diverged"] == 0
            else:
                assert group["n"] == 2 and group["diverged"] == 1, group
                assert shown in group["values"]
            metrics, text = await ok(mcp, "get_metrics", job_id=ids[3 * k + 1], history=True)
            assert metrics["latest"]["val"] == (shown or 1.79e308), metrics
        board = texts["list_jobs1"][0]["items"]
        diverged = [j["job_id"] for j in board if (j.get("score") or {}).get("diverged")]
        assert set(diverged) == {ids[3 * k + 1] for k, (_, s) in enumerate(TABLE) if s}
