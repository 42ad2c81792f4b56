"""One research round through ``air-mcp``: tool calls and reply bytes, before and after issue 18.

The round: three trials are running; wait, pick the best at equal steps, cancel the worst.
Both rows run on the same three jobs (each logs a val_loss curve into its MLflow run) with the
SDK's own client in-process, and count every call and the bytes of every result as sent (text
and structured content):

- before: wait_for_jobs, get_metrics (history) x 3, then cancel_job: what an agent had to do;
- after: wait_for_jobs(metric=...), compare_jobs(at_step=...), cancel_job.

The three launch_job calls come before the round and are counted apart. Goal: the round in at
most 4 calls and 4 KB.

    python bench/agent_round.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from _common import BENCH, scratch_home, table

GOAL_CALLS = 4
GOAL_BYTES = 4_000
STEPS = 400
AT_STEP = 300


def _import_sdk() -> None:
    """Import the `mcp` SDK, not bench/mcp.py: bench/ is first on sys.path."""
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != BENCH]
    try:
        import mcp  # noqa: F401
    finally:
        sys.path[:] = saved


_import_sdk()


class Counter:
    """Counts the calls made through it and the bytes of their results."""

    def __init__(self, mcp: Any) -> None:
        self.mcp, self.calls, self.bytes = mcp, 0, 0

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        result = await self.mcp.call_tool(tool, args)
        self.calls += 1
        self.bytes += len(result.model_dump_json(by_alias=True, exclude_none=True))
        if result.is_error:
            raise RuntimeError(result.content[0].text)
        return result.structured_content or {}


async def _launch(mcp: Any, client: Any) -> tuple[list[str], int]:
    """Three running trials, each with a val_loss curve in its run; the bytes of the launches."""
    from mlflow.entities import Metric

    counter = Counter(mcp)
    ids = []
    for n, lr in enumerate((1e-3, 3e-3, 1e-2)):
        job = await counter.call(
            "launch_job",
            command=[sys.executable, "-c", "import time; time.sleep(120)"],
            gpus=1,
            config={"lr": lr, "depth": 4},
            name=f"trial-{n}",
            experiment="agent-round",
        )
        ids.append(job["job_id"])
        curve = [Metric("val_loss", 3.0 - s / 200 + n * 0.2, 0, s) for s in range(0, STEPS, 10)]
        client.tracker.client.log_batch(job["run_id"], metrics=curve)
    return ids, counter.bytes


async def _before(mcp: Any, ids: list[str]) -> Counter:
    c = Counter(mcp)
    await c.call("wait_for_jobs", job_ids=ids, timeout_s=1)
    at: dict[str, float] = {}
    for job_id in ids:
        m = await c.call("get_metrics", job_id=job_id, keys=["val_loss"], history=True)
        points = [p for p in m["history"]["val_loss"] if p[0] <= AT_STEP]
        at[job_id] = points[-1][1]
    await c.call("cancel_job", job_id=max(at, key=at.__getitem__), reason="worst at equal steps")
    return c


async def _after(mcp: Any, ids: list[str]) -> Counter:
    c = Counter(mcp)
    await c.call("wait_for_jobs", job_ids=ids, timeout_s=1, metric="val_loss")
    rows = (await c.call("compare_jobs", job_ids=ids, metric="val_loss", at_step=AT_STEP))["rows"]
    at = {r["job_id"]: r["at_step"]["value"] for r in rows if r["status"] == "RUNNING"}
    await c.call("cancel_job", job_id=max(at, key=at.__getitem__), reason="worst at equal steps")
    return c


async def main() -> None:
    from mcp import Client as McpClient

    from air_skills import Client
    from mcp_server.server import build_server

    rows = []
    for name, round_fn in (("before", _before), ("after", _after)):
        with scratch_home(gpus=4):
            client = Client()
            async with McpClient(build_server(client)) as mcp:
                ids, launch_bytes = await _launch(mcp, client)
                c = await round_fn(mcp, ids)
                ok = c.calls <= GOAL_CALLS and c.bytes <= GOAL_BYTES
                rows.append([name, c.calls, c.bytes, 3, launch_bytes, "ok" if ok else "over"])
                client.cancel_all("bench done")
    print(table(["round", "calls", "bytes", "launch calls", "launch bytes", "goal"], rows))
    print(f"goal: the round in <= {GOAL_CALLS} calls and <= {GOAL_BYTES} bytes")


if __name__ == "__main__":
    import anyio

    anyio.run(main)
