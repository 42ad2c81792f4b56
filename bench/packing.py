"""Packing: the pure scheduler on a virtual clock, makespan against a lower bound and FIFO.

An event simulation: at every arrival and completion, ``schedule()`` is called with the queue,
the running jobs and 8 GPUs, and its starts take effect at once. 200 jobs need 1/2/4/8 GPUs
(60/25/10/5%) and run for lognormal (heavy-tailed) durations, seeded. The makespan is given
as a ratio to the lower bound max(sum(gpus * duration) / 8, max(arrival + duration)), which
is max(sum / 8, longest job) when all arrive at once; beside it, strict FIFO's (start jobs
in order while the head fits, never skip the head). Goal: at most 1.10.

Rows: the scheduler without duration estimates (backfill only until the head has waited
``starvation_s``), the same with bounded bypass (``Inventory.bypass_jobs``: the next BYPASS
submissions after a head reserved by age may still overtake it), and with estimates
(``QueuedJob.duration_est_s`` / ``expected_end``: EASY backfill), exact and as timeouts (1-3x
the real duration). Two arrival patterns: a burst
(all 200 queued at t=0) and a Poisson stream offered at 1.5x the pool's capacity.

    python bench/packing.py                 # 10 seeds
    python bench/packing.py --seeds 20 --jobs 500

A quota scenario from ``bench/packing_quota.py`` is printed after, when that file is present
(it exposes ``lines() -> list[str]``, or ``main()`` that prints its own).
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from _common import table, verdict

from air_skills.runtime.passes import queue_window
from air_skills.runtime.scheduler import Inventory, QueuedJob, RunningJob, schedule

GOAL = 1.10
GPUS = 8
SIZES = ((1, 0.60), (2, 0.25), (4, 0.10), (8, 0.05))
MEDIAN_S = 300.0  # lognormal durations: median 5 minutes
SIGMA = 1.2  # heavy tail: the mean is about 2x the median, the longest of 200 about 25x
STARVATION_S = 30.0  # the scheduler's default
BYPASS = 64  # bounded bypass: jobs submitted after a reserved head that may still overtake it


@dataclass(frozen=True)
class SimJob:
    job_id: str
    gpus: int
    duration_s: float
    arrival_s: float
    estimate_s: float  # what the user declared (a timeout): an upper bound


def workload(n: int, seed: int, pattern: str) -> list[SimJob]:
    """``n`` jobs: sizes by SIZES, lognormal durations, arrivals by ``pattern``."""
    rng = random.Random(seed)
    sizes, weights = zip(*SIZES, strict=True)
    mean_gpus = sum(s * w for s, w in SIZES)
    mean_s = MEDIAN_S * math.exp(SIGMA**2 / 2)
    rate = 1.5 * GPUS / (mean_gpus * mean_s)  # poisson: offered load 1.5x capacity
    t = 0.0
    jobs = []
    for i in range(n):
        if pattern == "poisson" and i:
            t += rng.expovariate(rate)
        dur = rng.lognormvariate(math.log(MEDIAN_S), SIGMA)
        gpus = rng.choices(sizes, weights)[0]
        jobs.append(SimJob(f"j{i:04d}", gpus, dur, t, dur * rng.uniform(1.0, 3.0)))
    return jobs


def lower_bound(jobs: list[SimJob]) -> float:
    work = sum(j.gpus * j.duration_s for j in jobs) / GPUS
    return max(work, max(j.arrival_s + j.duration_s for j in jobs))


Policy = Callable[[list[QueuedJob], list[RunningJob], float], list[tuple[str, tuple[int, ...]]]]


def air_policy(estimates: str, bypass: int = 0) -> Policy:
    """Our scheduler; ``estimates``: none, exact or timeout (as declared, 1-3x); ``bypass``:
    ``Inventory.bypass_jobs``.

    It sees the head of the queue as the local backend's pass does (queue_window jobs by
    priority, then age), not all of it.
    """
    inv = Inventory(
        gpus=tuple(range(GPUS)), cpu_slots=2, starvation_s=STARVATION_S, bypass_jobs=bypass
    )
    window = queue_window(GPUS)

    def decide(queued: list[QueuedJob], running: list[RunningJob], now: float):
        head = sorted(queued, key=lambda q: (-q.priority, q.seq))[:window]
        decision = schedule(head, running, inv, now)
        assert not decision.preempts  # one priority, nothing preemptible
        return [(s.job_id, s.gpus) for s in decision.starts]

    return decide


def fifo_policy() -> Policy:
    """Strict FIFO: start jobs in submission order while the head fits; never skip it."""

    def decide(queued: list[QueuedJob], running: list[RunningJob], now: float):
        free = sorted(set(range(GPUS)) - {g for r in running for g in r.gpus})
        out = []
        for job in sorted(queued, key=lambda q: q.seq):
            if job.gpus > len(free):
                break
            out.append((job.job_id, tuple(free[: job.gpus])))
            free = free[job.gpus :]
        return out

    return decide


def simulate(jobs: list[SimJob], policy: Policy, estimates: str = "none") -> float:
    """Run the workload on the virtual clock; returns the makespan (last end - first arrival)."""
    by_id = {j.job_id: j for j in jobs}
    seq = {j.job_id: i for i, j in enumerate(jobs)}
    events: list[tuple[float, int, str]] = []  # (time, 0 = completion / 1 = arrival, job)
    for j in jobs:
        heapq.heappush(events, (j.arrival_s, 1, j.job_id))
    queued: dict[str, QueuedJob] = {}
    running: dict[str, RunningJob] = {}
    end = 0.0

    def estimate(j: SimJob) -> float | None:
        return {"none": None, "exact": j.duration_s, "timeout": j.estimate_s}[estimates]

    while events:
        now = events[0][0]
        while events and events[0][0] == now:  # every event at this instant, then one pass
            _, kind, job_id = heapq.heappop(events)
            j = by_id[job_id]
            if kind == 1:
                queued[job_id] = QueuedJob(
                    job_id, j.gpus, 1, seq[job_id], j.arrival_s, duration_est_s=estimate(j)
                )
            else:
                del running[job_id]
                end = max(end, now)
        starts = policy(list(queued.values()), list(running.values()), now)
        held = {g for r in running.values() for g in r.gpus}
        for job_id, gpus in starts:
            assert len(gpus) == by_id[job_id].gpus and not held & set(gpus), "GPU given twice"
            held |= set(gpus)
            del queued[job_id]
            j = by_id[job_id]
            est = estimate(j)
            running[job_id] = RunningJob(
                job_id, gpus, 1, False, now, expected_end=None if est is None else now + est
            )
            heapq.heappush(events, (now + j.duration_s, 0, job_id))
        # A job that cannot start waits for the next completion: the queue only
        # drains, the scheduler is called again then.
    assert not queued and not running, "jobs left over: the scheduler starved someone"
    return end - min(j.arrival_s for j in jobs)


def quota_lines() -> list[str]:
    """The quota scenario's lines, from bench/packing_quota.py when present."""
    try:
        import packing_quota  # type: ignore[import-not-found]
    except ImportError:
        return []
    if hasattr(packing_quota, "lines"):
        return list(packing_quota.lines())
    if hasattr(packing_quota, "main"):
        packing_quota.main()
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)

    rows = []
    worst: dict[str, float] = {}
    for pattern in ("burst", "poisson"):
        ratios: dict[str, list[float]] = {
            "fifo": [],
            "none": [],
            "bypass": [],
            "exact": [],
            "timeout": [],
        }
        for seed in range(args.seeds):
            jobs = workload(args.jobs, seed, pattern)
            bound = lower_bound(jobs)
            ratios["fifo"].append(simulate(jobs, fifo_policy()) / bound)
            ratios["bypass"].append(simulate(jobs, air_policy("none", BYPASS)) / bound)
            for est in ("none", "exact", "timeout"):
                ratios[est].append(simulate(jobs, air_policy(est), est) / bound)
        for key, label in (
            ("fifo", "strict FIFO"),
            ("none", "air, no estimates"),
            ("bypass", f"air, no estimates, bypass <= {BYPASS}"),
            ("exact", "air, exact estimates (EASY)"),
            ("timeout", "air, timeouts 1-3x (EASY)"),
        ):
            values = ratios[key]
            rows.append(
                [pattern, label, statistics.mean(values), min(values), max(values)]
                + (
                    [f"<= {GOAL}", verdict(statistics.mean(values), GOAL, False)]
                    if key != "fifo"
                    else ["", ""]
                )
            )
            worst[f"{pattern}/{key}"] = statistics.mean(values)

    print(
        f"{args.jobs} jobs of 1/2/4/8 GPUs (60/25/10/5%), lognormal durations (median"
        f" {MEDIAN_S:.0f} s, sigma {SIGMA}), {GPUS} GPUs, seeds 0-{args.seeds - 1}\n"
        "makespan / lower bound (max(sum gpu*duration / 8, max arrival+duration))\n"
    )
    print(table(["arrivals", "scheduler", "mean", "min", "max", "goal", ""], rows))
    for pattern in ("burst", "poisson"):
        print(
            f"\n{pattern}: air {worst[f'{pattern}/none']:.3f} (no estimates),"
            f" {worst[f'{pattern}/bypass']:.3f} (bypass <= {BYPASS}),"
            f" {worst[f'{pattern}/timeout']:.3f} (timeouts) vs FIFO {worst[f'{pattern}/fifo']:.3f}"
        )
    extra = quota_lines()
    if extra:
        print()
        print("\n".join(extra))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
