"""The first launch on a fresh AIR_HOME against the ones after it (issue 24: 15.9 s vs ~0.3 s).

Where the time went: MLflow's sqlite store is created by some 60 schema migrations (10-20 s on
a busy machine), and MLflow's import takes seconds more; both fell inside the agent's first
launch_job. Now a machine keeps its first empty store as a template (tracking/sqlite_store.py)
and ``air-mcp`` imports MLflow and readies the store beside the session's start. Each row runs
in a fresh interpreter with a fresh home, through the SDK's MCP client in-process, timing four
launch_job calls (the agent's first call comes after initialize and tools/list, as it does):

- no template: the first home on this machine (an empty cache folder);
- template: a later fresh home (the cache holds the store the first row built);
- template, no warm-up: a plain ``Client`` (a script or ``air launch``), no server start.

Goal: the first launch within 2x of the later ones.

    python bench/first_launch.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import scratch_home, table

GOAL = 2.0


def child(warm: bool) -> dict[str, float]:
    """Four launches on a fresh home: their times in seconds (run in its own interpreter)."""
    import anyio
    from agent_round import Counter  # noqa: F401  (the SDK, not bench/mcp.py)

    async def run() -> list[float]:
        from mcp import Client as McpClient

        from air_skills import Client
        from mcp_server.server import build_server, long_lived_client

        work = tempfile.mkdtemp()
        Path(work, "t.py").write_text("print('---')\nprint('loss: 1')\n")
        client = long_lived_client() if warm else Client()
        times = []
        async with McpClient(build_server(client)) as mcp:
            await mcp.list_tools()
            for n in range(4):
                args = {"command": [sys.executable, "t.py"], "workdir": work, "config": {"n": n}}
                started = time.perf_counter()
                result = await mcp.call_tool("launch_job", args)
                times.append(time.perf_counter() - started)
                assert not result.is_error, result.content
        client.cancel_all("bench done")
        return times

    with scratch_home(gpus=2):
        times = anyio.run(run)
    return {"first": times[0], "later": statistics.fmean(times[1:])}


def main() -> None:
    cache = tempfile.mkdtemp(prefix="air-bench-cache-")  # the template store lands here
    rows = []
    for name, warm in (("no template", True), ("template", True), ("template, no warm-up", False)):
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        done = subprocess.run(
            [sys.executable, __file__, "--child", "warm" if warm else "cold"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise SystemExit(f"{name}: {done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        ratio = got["first"] / got["later"]
        rows.append([name, got["first"], got["later"], ratio, "ok" if ratio <= GOAL else "over"])
    print(table(["home", "first launch s", "later launches s", "ratio", "goal"], rows))
    print(f"goal: the first launch within {GOAL:g}x of the later ones")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2] == "warm")))
    else:
        main()
