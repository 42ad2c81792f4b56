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

Issue 39's scripted session (``--session issue39``): rounds of 3 variants x 3 seeds over one
base with a patch (a ``diff -u a/x c/x`` one), the third round with a config whose seed 1
diverges (MLflow's float-max clamp), then a study started and followed to its end with
wait_for_study's ``since`` cursor; calls, argument KB and reply KB per round, and internal
errors. Goals: a clean round in 2 calls and 3 KB of replies, a diverged one in 3 calls, no
internal error.

    python bench/agent_session.py [--rounds N] [--session grid|issue39|both]
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


# --- issue 39's session: variants x seeds with one patch, a diverged seed, a study followed ---

SCRIPTED_TRAIN = """\
import json, math, os
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
noise = ((c["seed"] * 7919) % 13 - 6) * 0.002
loss = (math.log10(c["lr"]) + 2.2) ** 2 + 0.37 + noise
if c["lr"] >= 0.05 and c["seed"] == 1:
    loss = 1.7976931348623157e308  # diverged: MLflow's clamp of an inf
print("---")
print("val_loss:", repr(loss))
"""
# a patch made with `diff -u a/train.py c/train.py` (issue 39.4): it edits train.py
PATCH = (
    "--- a/train.py\n+++ c/train.py\n@@ -1,2 +1,3 @@\n import json, math, os\n"
    "+# patched: the round's code change\n"
    ' c = json.load(open(os.environ["AIR_CONFIG_FILE"]))\n'
)
GOAL_REPLY_BYTES = 3_000  # a clean round's replies
FACTORS = (0.55, 0.8, 1.3)  # the next round's learning rates around the best mean's
GOAL_DIVERGED_CALLS = 3


class ArgCounter(Counter):
    """Counts calls, the bytes of their arguments and of their results, and internal errors."""

    def __init__(self, mcp: Any) -> None:
        super().__init__(mcp)
        self.arg_bytes = 0
        self.internal = 0

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        import json

        self.arg_bytes += len(json.dumps(args))
        try:
            return await super().call(tool, **args)
        except RuntimeError as exc:
            self.internal += "[internal-error]" in str(exc)
            raise


async def _scripted_round(c: ArgCounter, work: str, lrs: list[float], n: int) -> float:
    base = {"command": [sys.executable, "train.py"], "workdir": work, "patch": PATCH}
    launched = await c.call(
        "launch_jobs",
        jobs=[base],
        variants=[{"config": {"lr": lr}} for lr in lrs],
        seeds=SEEDS,
        idempotency_key=f"s39-{n}",
    )
    reply = await c.call(
        "wait_for_jobs",
        job_ids=[launched["batch_id"]],
        mode="all",
        timeout_s=600,
        metric="val_loss",
        group_by="seed",
    )
    return reply["groups"][0]["config"].get("lr", lrs[0])


async def _scripted(rounds: int) -> tuple[list[list[Any]], list[Any]]:
    """The session: ``rounds`` rounds (the third tries lr up to 0.08: one seed diverges), then
    a study started and followed to its end with wait_for_study's cursor."""
    from mcp import Client as McpClient

    from air_skills import Client
    from mcp_server.server import build_server

    rows: list[list[Any]] = []
    with scratch_home(gpus=4), tempfile.TemporaryDirectory() as work:
        Path(work, "train.py").write_text(SCRIPTED_TRAIN)
        async with McpClient(build_server(Client())) as mcp:
            centre = 1e-3
            for n in range(rounds):
                c = ArgCounter(mcp)
                # new configs each round (a config run before is a duplicate, not a trial)
                lrs = [0.02, 0.04, 0.08] if n == 2 else [round(centre * f, 8) for f in FACTORS]
                found = await _scripted_round(c, work, lrs, n)
                centre = found if n != 2 else centre
                kind = "diverged seed" if n == 2 else "clean"
                goal_calls = GOAL_DIVERGED_CALLS if n == 2 else GOAL_CALLS
                ok = c.calls <= goal_calls and (n == 2 or c.bytes <= GOAL_REPLY_BYTES)
                rows.append([f"round {n}", kind, c.calls, c.arg_bytes / 1e3, c.bytes / 1e3,
                             c.internal, "ok" if ok else "over"])  # fmt: skip
            c = ArgCounter(mcp)
            study = {
                "name": "s39",
                "command": [sys.executable, "train.py"],
                "workdir": work,
                "base_config": {"lr": 1e-3, "seed": 0},
                "search_space": {"lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True}},
                "objective": {"metric": "val_loss", "direction": "minimize"},
                "budget": {"trials": 8, "concurrency": 4},
                "noise": {"repeats": 2},
                "gpus_per_trial": 0,
                "proposer": "tpe",
            }
            await c.call("start_study", study=study, study_dir=str(Path(work, "s39")))
            reply = await c.call("wait_for_study", study=str(Path(work, "s39")), timeout_s=300)
            while reply.get("state") == "running":
                reply = await c.call(
                    "wait_for_study",
                    study=str(Path(work, "s39")),
                    timeout_s=300,
                    since=reply["cursor"],
                )
            study_row = ["study", reply.get("state"), c.calls, c.arg_bytes / 1e3,
                         c.bytes / 1e3, c.internal, "-"]  # fmt: skip
    return rows, study_row


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument(
        "--session", choices=["grid", "issue39", "both"], default="both",
        help="grid: before/after of issue 24; issue39: the scripted session of issue 39",
    )  # fmt: skip
    args = parser.parse_args()
    if args.session in ("grid", "both"):
        rows = [
            await _session("before", _before, args.rounds),
            await _session("after", _after, args.rounds),
        ]
        headers = ["session", "rounds", "calls/round", "bytes/round", "max bytes", "best lr",
                   "goal"]  # fmt: skip
        print(table(headers, rows))
        print(
            f"goal: a round of 3 configs x 3 seeds in <= {GOAL_CALLS} calls and <= {GOAL_BYTES}"
            " bytes"
        )
    if args.session in ("issue39", "both"):
        rounds, study = await _scripted(min(args.rounds, 6))
        headers = ["round", "kind", "calls", "args KB", "replies KB", "internal errors", "goal"]
        print(table(headers, [*rounds, study]))
        print(
            f"goal: a clean round (3 variants x 3 seeds, one patch) in <= {GOAL_CALLS} calls and"
            f" <= {GOAL_REPLY_BYTES / 1e3:g} KB of replies; a round with a diverged seed in <="
            f" {GOAL_DIVERGED_CALLS} calls; 0 internal errors"
        )


if __name__ == "__main__":
    import anyio

    anyio.run(main)
