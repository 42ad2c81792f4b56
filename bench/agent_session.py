"""An agent's research session through ``air-mcp``: calls and bytes per round (issue 24).

12 rounds of 3 configs x 3 seeds, each round: launch the nine jobs, wait for them all, pick
the config with the best mean over its seeds, centre the next round's three learning rates
on it. Both rows run the same session against the server through the SDK's own client
in-process, counting every call and the bytes of every result as sent:

- before: one launch_job per config x seed, then wait_for_jobs(mode="all", metric=...), and
  the means worked out by hand from the per-job values (what the agent of issue 24 did);
- after: launch_jobs(spec, seeds, grid), then wait_for_jobs(mode="all", metric=...,
  group_by="seed"), which gives the means.

Goal: the round in at most 2 calls and 6 KB.

    python bench/agent_session.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import scratch_home, table
from agent_round import Counter  # imports the SDK first, not bench/mcp.py

GOAL_CALLS = 2
GOAL_BYTES = 6_000
SEEDS = [0, 1, 2]
TRAIN = """\
import json, math, os
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
noise = ((c["seed"] * 7919) % 13 - 6) * 0.002
print("---")
print("val_loss:", round((math.log10(c["lr"]) + 2.2) ** 2 + 0.37 + noise, 6))
"""


def _grid(centre: float) -> list[float]:
    return [round(centre / 2, 8), centre, round(centre * 2, 8)]


async def _before(c: Any, work: str, lrs: list[float], n: int) -> float:
    ids: dict[float, list[str]] = {}
    for lr in lrs:
        for seed in SEEDS:
            job = await c.call(
                "launch_job",
                command=[sys.executable, "train.py"],
                workdir=work,
                config={"lr": lr, "seed": seed},
                name=f"r{n} lr={lr} seed={seed}",
                idempotency_key=f"before-{n}-{lr}-{seed}",
            )
            ids.setdefault(lr, []).append(job["job_id"])
    every = [j for js in ids.values() for j in js]
    reply = await c.call(
        "wait_for_jobs", job_ids=every, mode="all", timeout_s=600, metric="val_loss"
    )
    value = {j["job_id"]: (j.get("score") or {}).get("latest") for j in reply["jobs"]}
    means = {lr: statistics.fmean(value[j] for j in js) for lr, js in ids.items()}
    return min(means, key=means.__getitem__)


async def _after(c: Any, work: str, lrs: list[float], n: int) -> float:
    spec = {"command": [sys.executable, "train.py"], "workdir": work, "name": f"r{n}"}
    launched = await c.call(
        "launch_jobs", jobs=[spec], seeds=SEEDS, grid={"lr": lrs}, idempotency_key=f"after-{n}"
    )
    ids = [j["job_id"] for j in launched["jobs"]]
    reply = await c.call(
        "wait_for_jobs",
        job_ids=ids,
        mode="all",
        timeout_s=600,
        metric="val_loss",
        group_by="seed",
    )
    return reply["groups"][0]["config"]["lr"]


async def _session(name: str, round_fn: Any, rounds: int) -> list[Any]:
    from mcp import Client as McpClient

    from air_skills import Client
    from mcp_server.server import build_server

    with scratch_home(gpus=4), tempfile.TemporaryDirectory() as work:
        Path(work, "train.py").write_text(TRAIN)
        client = Client()
        async with McpClient(build_server(client)) as mcp:
            counts, sizes, centre = [], [], 1e-3
            for n in range(rounds):
                c = Counter(mcp)
                centre = await round_fn(c, work, _grid(centre), n)
                counts.append(c.calls)
                sizes.append(c.bytes)
        most = max(sizes)
        ok = max(counts) <= GOAL_CALLS and most <= GOAL_BYTES
        return [
            name,
            rounds,
            statistics.fmean(counts),
            round(statistics.fmean(sizes)),
            most,
            f"{centre:g}",
            "ok" if ok else "over",
        ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    rows = [
        await _session("before", _before, args.rounds),
        await _session("after", _after, args.rounds),
    ]
    headers = ["session", "rounds", "calls/round", "bytes/round", "max bytes", "best lr", "goal"]
    print(table(headers, rows))
    print(
        f"goal: a round of 3 configs x 3 seeds in <= {GOAL_CALLS} calls and <= {GOAL_BYTES} bytes"
    )


if __name__ == "__main__":
    import anyio

    anyio.run(main)
