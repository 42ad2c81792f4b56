"""MCP latency: ``get_job`` through ``air-mcp`` over stdio and HTTP, as ratios to ``Client.get``.

All rows are measured in one run, on one job, with the SDK's own client (``mcp.Client``),
taking turns in blocks of calls so that a change in machine load hits every row alike:

- ``Client.get`` in-process: the baseline every ratio is taken against;
- ``get_job`` in-process through ``mcp.Client(server)`` (the server's own cost, no transport);
- ``get_job`` over stdio (``air-mcp`` spawned) and over streamable HTTP (``air-mcp --transport
  http`` with a bearer token);
- the SDK's floor over stdio: an empty tool on a bare ``MCPServer`` with the SDK's own stdio
  transport, to show what the SDK costs by itself (``air-mcp`` uses ``mcp_server.stdio``);
- head of line: ``get_job`` over stdio while a ``wait_for_jobs`` call blocks on the same
  session, as a ratio to the idle stdio figure (goal: about 1, i.e. normal speed);
- reply sizes: a tracked running job's ``get_job`` and a ``list_jobs`` page of 50 (goals: 1 KB
  and 6 KB, the whole result as sent: text and structured content).

Goal: stdio p50 <= 2 ms.

    python bench/mcp.py            # 300 calls per row
    python bench/mcp.py --n 1000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import BENCH, percentile, scratch_home, table, verdict


def _import_sdk() -> None:
    """Import the `mcp` SDK, not this file: `python bench/mcp.py` puts bench/ first on sys.path."""
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != BENCH]
    try:
        import mcp
        import mcp.client.streamable_http  # noqa: F401
    finally:
        sys.path[:] = saved


_import_sdk()

GOAL_STDIO_P50_MS = 2.0
WARMUP = 30
BLOCK = 25

BASE = "Client.get (in-process)"
IDLE = "get_job stdio"
BUSY = "get_job stdio, wait_for_jobs blocking"
FLOOR_ROW = "SDK floor: empty tool, stdio"
FLOOR = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("floor", log_level="WARNING")

@server.tool()
def noop() -> str:
    return "ok"

server.run()
"""


def air_mcp() -> list[str]:
    script = Path(sys.executable).with_name("air-mcp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mcp_server.server"]


def start_http(token: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [*air_mcp(), "--transport", "http", "--port", "0"],
        env={**os.environ, "AIR_MCP_TOKEN": token},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"(http://\S+/mcp)", line)
        if found:
            # keep draining stderr so that the server never blocks on a full pipe
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, found.group(1)
    raise RuntimeError(f"air-mcp --transport http did not start (exit {proc.wait()})")


async def measure(n: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Rows take turns in blocks of BLOCK calls: load changes hit all rows alike, while each
    block keeps its own process warm (call-by-call turns would measure cold caches)."""
    from contextlib import AsyncExitStack

    import anyio
    import httpx2
    from mcp import Client as McpClient
    from mcp import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    from air_skills import Client
    from mcp_server.server import build_server

    client = Client()
    done = client.launch({"command": [sys.executable, "-c", "pass"], "track": False})
    client.wait([done.job_id], timeout_s=60)
    job = {"job_id": done.job_id}
    env = dict(os.environ)
    command, *args = air_mcp()
    token = "bench-" + os.urandom(16).hex()
    proc, url = start_http(token)
    async with AsyncExitStack() as stack:
        stack.callback(proc.wait, 30)
        stack.callback(proc.terminate)
        enter = stack.enter_async_context
        inproc = await enter(McpClient(build_server(client)))
        stdio = await enter(McpClient(StdioServerParameters(command=command, args=args, env=env)))
        busy = await enter(McpClient(StdioServerParameters(command=command, args=args, env=env)))
        floor = await enter(
            McpClient(StdioServerParameters(command=sys.executable, args=["-c", FLOOR], env=env))
        )
        http_client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        http = await enter(McpClient(streamable_http_client(url, http_client=http_client)))

        async def call_sync() -> None:
            client.get(done.job_id)

        rows: dict[str, Callable[[], Awaitable[Any]]] = {
            BASE: call_sync,
            "get_job in-process MCP": lambda: inproc.call_tool("get_job", job),
            IDLE: lambda: stdio.call_tool("get_job", job),
            BUSY: lambda: busy.call_tool("get_job", job),
            FLOOR_ROW: lambda: floor.call_tool("noop"),
            "get_job HTTP": lambda: http.call_tool("get_job", job),
        }
        # head of line: on the `busy` session, a wait_for_jobs blocks for the whole run
        sleeper = await busy.call_tool(
            "launch_job",
            {"command": [sys.executable, "-c", "import time; time.sleep(600)"], "track": False},
        )
        sleeper_id = sleeper.structured_content["job_id"]
        finished: list[bool] = []

        async def wait() -> None:
            await busy.call_tool("wait_for_jobs", {"job_ids": [sleeper_id], "timeout_s": 600})
            finished.append(True)

        times: dict[str, list[float]] = {name: [] for name in rows}
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            for fn in rows.values():
                for _ in range(WARMUP):
                    await fn()
            for _ in range(max(1, n // BLOCK)):
                for name, fn in rows.items():
                    for _ in range(BLOCK):
                        t0 = time.perf_counter()
                        await fn()
                        times[name].append(time.perf_counter() - t0)
            assert not finished, "wait_for_jobs returned early: the head-of-line row means nothing"
            await busy.call_tool("cancel_job", {"job_id": sleeper_id})
    sizes = await reply_sizes(client, build_server(client))
    return times, sizes


async def reply_sizes(client: Any, server: Any) -> dict[str, int]:
    """Bytes of a get_job reply (tracked, running) and of a list_jobs page of 50 queued jobs."""
    from mcp import Client as McpClient

    blocker = client.launch(
        {
            "command": [sys.executable, "-c", "import time; time.sleep(600)"],
            "gpus": 4,
            "name": "blocker",
            "experiment": "bench-mcp",
        }
    )
    for i in range(50):  # queued behind the blocker: no processes
        client.launch(
            {
                "command": [sys.executable, "train.py"],
                "gpus": 1,
                "track": False,
                "name": f"tinygpt-lr-sweep-{i:03d}",
            }
        )
    async with McpClient(server) as mcp:
        job = await mcp.call_tool("get_job", {"job_id": blocker.job_id})
        page = await mcp.call_tool("list_jobs", {"limit": 50})
    client.cancel_all()

    def size(result: Any) -> int:
        return len(result.model_dump_json(by_alias=True, exclude_none=True))

    return {"get_job": size(job), "list_jobs (50)": size(page)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=300, help="calls per row")
    args = parser.parse_args()
    import anyio

    with scratch_home(gpus=4, AIR_GRACE_S="2"):
        times, sizes = anyio.run(measure, args.n)
    base50, base95 = percentile(times[BASE], 50), percentile(times[BASE], 95)
    out = []
    for name, values in times.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        out.append((name, p50 * 1e3, p95 * 1e3, p50 / base50, p95 / base95))
    print(f"get_job latency, {args.n} calls per row, rows taking turns in blocks of {BLOCK}")
    print("(ms; ratios to Client.get in-process)")
    print(table(["path", "p50 ms", "p95 ms", "p50 ratio", "p95 ratio"], out))
    hol = percentile(times[BUSY], 50) / percentile(times[IDLE], 50)
    print(f"\nhead of line: get_job p50 while a wait_for_jobs blocks = {hol:.2f}x idle stdio")
    stdio_p50_ms = percentile(times[IDLE], 50) * 1e3
    floor_ms = percentile(times[FLOOR_ROW], 50) * 1e3
    print(
        f"goal stdio p50 <= {GOAL_STDIO_P50_MS} ms: {stdio_p50_ms:.2f} ms,"
        f" {verdict(stdio_p50_ms, GOAL_STDIO_P50_MS, higher_is_better=False)}"
        f" (a bare SDK server's empty tool: {floor_ms:.2f} ms)"
    )
    goals = {"get_job": 1000, "list_jobs (50)": 6000}
    for name, size in sizes.items():
        ok = verdict(size, goals[name], higher_is_better=False)
        print(f"reply size, {name}: {size} bytes (goal <= {goals[name]}): {ok}")


if __name__ == "__main__":
    main()
