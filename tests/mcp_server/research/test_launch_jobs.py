"""launch_jobs and group_by="seed" through a real MCP client (the SDK's, in-process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient

pytestmark = pytest.mark.anyio
PY = sys.executable
TRAIN = """\
import json, os
config = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("---")
print("val_loss:", config["lr"] * 10 + config["seed"] * 0.5)
"""


def _script(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


async def test_one_call_launches_configs_times_seeds_and_the_wait_ranks_by_mean(
    tracked: str, server, tmp_path: Path
) -> None:
    work = _script(tmp_path)
    spec = {"command": [PY, "train.py"], "workdir": str(work), "name": "r1"}
    async with McpClient(server) as mcp:
        launched = await mcp.call_tool(
            "launch_jobs",
            {"jobs": [spec], "seeds": [0, 1], "grid": {"lr": [0.3, 0.1]}, "idempotency_key": "r1"},
        )
        assert not launched.is_error, launched.content[0].text
        jobs = launched.structured_content["jobs"]
        assert [j["name"] for j in jobs] == [
            "r1 lr=0.3 seed=0",
            "r1 lr=0.3 seed=1",
            "r1 lr=0.1 seed=0",
            "r1 lr=0.1 seed=1",
        ]
        assert launched.content[0].text.startswith("4 launched; batch_id batch-")
        ids = [j["job_id"] for j in jobs]
        again = await mcp.call_tool(
            "launch_jobs",
            {"jobs": [spec], "seeds": [0, 1], "grid": {"lr": [0.3, 0.1]}, "idempotency_key": "r1"},
        )
        assert [j["job_id"] for j in again.structured_content["jobs"]] == ids  # a safe retry
        waited = await mcp.call_tool(
            "wait_for_jobs",
            {
                "job_ids": ids,
                "mode": "all",
                "timeout_s": 240,
                "metric": "val_loss",
                "group_by": "seed",
            },
        )
        reply = waited.structured_content
        assert reply["done"] and reply["jobs"] == []  # all succeeded: the groups hold them
        best, worst = reply["groups"]
        assert best["config"] == {"lr": 0.1} and best["members"] == ids[2:]
        assert best["n"] == 2 and best["mean"] == pytest.approx(1.25)
        assert best["std"] == pytest.approx(0.35355, rel=1e-3)
        assert worst["mean"] == pytest.approx(3.25)
        assert "mean of 2 run(s)" in waited.content[0].text
        listed = await mcp.call_tool(
            "list_jobs", {"metric": "val_loss", "group_by": "seed", "limit": 10}
        )
        assert [g["mean"] for g in listed.structured_content["groups"]] == pytest.approx(
            [1.25, 3.25]
        )
        compared = await mcp.call_tool(
            "compare_jobs", {"job_ids": ids, "metric": "val_loss", "group_by": "seed"}
        )
        assert compared.structured_content["groups"][0]["members"] == ids[2:]


async def test_one_bad_item_launches_none_and_names_the_item(server, tmp_path: Path) -> None:
    work = _script(tmp_path)
    good = {"command": [PY, "train.py"], "workdir": str(work), "config": {"lr": 1, "seed": 0}}
    bad = {**good, "command": [PY, "trian.py"]}
    patch = "--- a/train.py\n+++ b/train.py\n@@ -1,1 +1,1 @@\n-import nothing\n+import os\n"
    async with McpClient(server) as mcp:
        refused = await mcp.call_tool(
            "launch_jobs", {"jobs": [good, bad, {**good, "patch": patch}, {"gpus": 1}]}
        )
        assert refused.is_error
        text = refused.content[0].text
        assert text.startswith("[invalid-spec] 3 of 4 job(s) refused; nothing was launched")
        assert "item 1:" in text and "did you mean train.py" in text
        assert "item 2:" in text and "patch" in text
        assert "item 3:" in text and "command" in text
        listed = await mcp.call_tool("list_jobs", {})
        assert listed.structured_content["items"] == []


async def test_dry_run_checks_every_item_and_launches_nothing(server, tmp_path: Path) -> None:
    work = _script(tmp_path)
    spec = {"command": [PY, "train.py"], "workdir": str(work), "config": {"lr": 1}}
    async with McpClient(server) as mcp:
        dry = await mcp.call_tool(
            "launch_jobs", {"jobs": [spec], "seeds": [1, 2, 3], "dry_run": True}
        )
        reply = dry.structured_content
        assert reply["dry_run"] and [j["job_id"] for j in reply["jobs"]] == ["dry-run"] * 3
        assert "DRY RUN" in reply["message"] and "nothing was launched" in dry.content[0].text
        both = await mcp.call_tool("launch_jobs", {"jobs": [spec, spec], "variants": [{}]})
        assert both.is_error and "variants apply to one base spec" in both.content[0].text
        listed = await mcp.call_tool("list_jobs", {})
        assert listed.structured_content["items"] == []
