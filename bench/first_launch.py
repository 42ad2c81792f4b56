"""The first launch on a fresh AIR_HOME against the ones after it (issue 24: 15.9 s vs ~0.3 s).

Where the time went: MLflow's sqlite store is created by some 60 schema migrations (10-20 s on
a busy machine), and MLflow's import takes seconds more; both fell inside the agent's first
launch_job. Now a machine keeps its first empty store as a template (tracking/sqlite_store.py)
and ``air-mcp`` imports MLflow and readies the store beside the session's start. Each row runs
in a fresh interpreter with a fresh home, through the SDK's MCP client in-process, timing four
launch_job calls (the agent's first call comes after initialize and tools/list, as it does):

- no template: the first home on this machine (an empty cache folder);
- template: a later fresh home (the cache holds the store the first row built);
- template, after air-mcp's warm-up: the same, the first call once the warm-up is done (an
  agent's think time between tools/list and its first launch);
- template, no warm-up: a plain ``Client`` (a script or ``air launch``), no server start.

- template, no warm-up, warm home: the same on a home the previous row's process used (what
  a first call costs the process rather than the home).

air-mcp's warm-up also starts an idle supervisor for the home (runtime/scheduling/spawn.py
``idle_ahead``): the first launch hands its job over as the later ones do, instead of forking
a supervisor inside the call.

Then the path an agent driving the CLI takes: a fresh ``air launch --json`` process on a fresh
home against a fresh one on a warm home (wall and CPU seconds, medians, alternated).

Goal: the first launch within 2x of the later ones.

    python bench/first_launch.py [--n 5]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import scratch_home, table

GOAL = 2.0


def child(mode: str) -> dict[str, float]:
    """Four launches on a fresh home: their times in seconds (run in its own interpreter)."""
    import anyio
    from agent_round import Counter  # noqa: F401  (the SDK, not bench/mcp.py)

    async def run() -> list[float]:
        # The SDK's client checks a result against its tool's output schema with jsonschema,
        # imported on its first check (~0.45 s, most of the first call once air-mcp had warmed
        # up): the agent's side, not the server's; imported before anything is timed.
        import jsonschema  # noqa: F401
        from mcp import Client as McpClient

        from air_skills import Client
        from mcp_server.server import build_server, long_lived_client

        work = tempfile.mkdtemp()
        Path(work, "t.py").write_text("print('---')\nprint('loss: 1')\n")
        client = long_lived_client() if mode != "cold" else Client()
        if mode == "after-warm-up":  # an agent's think time: the warm-up is done
            import threading

            from mcp_server.server import WARM_UP

            for thread in threading.enumerate():
                if thread.name == WARM_UP:
                    thread.join(600)
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

    if os.environ.get("BENCH_HOME"):  # a home kept between rows
        os.environ.update(AIR_HOME=os.environ["BENCH_HOME"], AIR_SIMULATED_GPUS="2")
        times = anyio.run(run)
    else:
        with scratch_home(gpus=2, AIR_SUPERVISOR_LINGER_S="60"):  # the product's default
            times = anyio.run(run)
    return {"first": times[0], "later": statistics.fmean(times[1:])}


def cli_launch(home: str, cwd: str) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh `air launch --json` process on ``home``."""
    env = {**os.environ, "AIR_HOME": home, "AIR_SIMULATED_GPUS": "2"}
    air = str(Path(sys.executable).parent / "air")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [air, "launch", "--json", "--allow-duplicate", "--", sys.executable, "t.py"],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"air launch: {done.stdout[-1000:]} {done.stderr[-1000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cli_rows(n: int) -> list[list[object]]:
    """A fresh `air launch --json` process: on a fresh home vs on a warm one, alternated."""
    root = Path(tempfile.mkdtemp(prefix="air-bench-cli-"))
    (root / "t.py").write_text("print('---')\nprint('loss: 1')\n")
    warm = str(root / "warm")
    cli_launch(warm, str(root))  # the warm home's first launch
    got: dict[str, list[tuple[float, float]]] = {"fresh home": [], "warm home": []}
    for i in range(n):
        got["fresh home"].append(cli_launch(str(root / f"fresh-{i}"), str(root)))
        got["warm home"].append(cli_launch(warm, str(root)))
    return [
        [name, statistics.median(w for w, _ in v), statistics.median(c for _, c in v)]
        for name, v in got.items()
    ]


def main() -> None:
    n = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 5
    cache = tempfile.mkdtemp(prefix="air-bench-cache-")  # the template store lands here
    kept = os.path.join(tempfile.mkdtemp(prefix="air-bench-home-"), "air_home")
    rows = []
    for name, mode, home in (
        ("no template", "warm", ""),
        ("template", "warm", ""),
        ("template, after air-mcp's warm-up", "after-warm-up", ""),
        ("template, no warm-up", "cold", kept),  # a fresh home, kept for the next row
        ("template, no warm-up, warm home", "cold", kept),
    ):
        env = {**os.environ, "XDG_CACHE_HOME": cache, "BENCH_HOME": home}
        done = subprocess.run(
            [sys.executable, __file__, "--child", mode],
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
    print("in-process: the first launch_job of a fresh interpreter against its later ones")
    print(table(["home", "first launch s", "later launches s", "ratio", "goal"], rows))
    print(f"goal: the first launch within {GOAL:g}x of the later ones")
    cli = cli_rows(n)
    print(f"\nthe agent's CLI path: a fresh `air launch --json` process (median of {n})")
    print(table(["home", "wall s", "CPU s"], cli))
    ratio = cli[0][1] / cli[1][1]  # type: ignore[operator]
    print(f"fresh home / warm home: {ratio:.2f}x wall ({'ok' if ratio <= GOAL else 'over'})")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
    else:
        main()
