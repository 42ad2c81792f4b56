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

The **classes** rows repeat durations per job class, as an agent's studies and sweeps do:
CLASSES classes (one size and one typical duration each), every job its class's duration
times 10% noise. Without estimates, with learned ones (runtime/store/estimates.py: the median of
the class's finished jobs times a safety factor, and for a class with none yet a prior from
the classes the pass reads, as the pass computes them), and with the exact durations (the
oracle). "big wait" is the longest wait of an 8-GPU job: never starved.

    python bench/packing.py                 # 10 seeds
    python bench/packing.py --seeds 20 --jobs 500
    python bench/packing.py --classes 5     # fewer, larger job classes

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

from air_skills.runtime.scheduling.passes import queue_window
from air_skills.runtime.scheduling.scheduler import Inventory, QueuedJob, RunningJob, schedule
from air_skills.runtime.store.estimates import RECENT, with_prior
from air_skills.runtime.store.estimates import estimate as learned_estimate

GOAL = 1.10
GPUS = 8
SIZES = ((1, 0.60), (2, 0.25), (4, 0.10), (8, 0.05))
MEDIAN_S = 300.0  # lognormal durations: median 5 minutes
SIGMA = 1.2  # heavy tail: the mean is about 2x the median, the longest of 200 about 25x
STARVATION_S = 30.0  # the scheduler's default
BYPASS = 64  # bounded bypass: jobs submitted after a reserved head that may still overtake it
CLASSES = 20  # job classes of the repeating workload (a study's trials, a sweep)
CLASS_NOISE = 0.1  # run-to-run noise within a class (lognormal sigma)


@dataclass(frozen=True)
class SimJob:
    job_id: str
    gpus: int
    duration_s: float
    arrival_s: float
    estimate_s: float  # what the user declared (a timeout): an upper bound
    klass: str = ""  # jobs of one class run about as long (same command and study)


@dataclass(frozen=True)
class SimResult:
    makespan_s: float
    big_wait_s: float  # the longest wait (start - arrival) of a job that needs every GPU


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


def class_workload(n: int, seed: int, pattern: str, classes: int = CLASSES) -> list[SimJob]:
    """``n`` jobs of ``classes`` classes (one size and one typical duration each, drawn as in
    ``workload``); a job's duration is its class's times lognormal noise (sigma CLASS_NOISE)."""
    rng = random.Random(seed)
    sizes, weights = zip(*SIZES, strict=True)
    kinds = [
        (rng.choices(sizes, weights)[0], rng.lognormvariate(math.log(MEDIAN_S), SIGMA))
        for _ in range(classes)
    ]
    mean_work = sum(g * d for g, d in kinds) / classes
    rate = 1.5 * GPUS / mean_work  # poisson: offered load 1.5x capacity
    t = 0.0
    jobs = []
    for i in range(n):
        if pattern == "poisson" and i:
            t += rng.expovariate(rate)
        k = rng.randrange(classes)
        gpus, typical = kinds[k]
        dur = typical * rng.lognormvariate(0.0, CLASS_NOISE)
        jobs.append(SimJob(f"j{i:04d}", gpus, dur, t, dur * rng.uniform(1.0, 3.0), f"c{k}"))
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


def simulate(jobs: list[SimJob], policy: Policy, estimates: str = "none") -> SimResult:
    """Run the workload on the virtual clock: the makespan (last end - first arrival) and the
    longest wait of a job that needs every GPU.

    ``estimates``: none, exact (the oracle), timeout (as declared) or learned (runtime/
    estimates.py from the class's finished jobs, recomputed at every pass as the pass does).
    """
    by_id = {j.job_id: j for j in jobs}
    seq = {j.job_id: i for i, j in enumerate(jobs)}
    events: list[tuple[float, int, str]] = []  # (time, 0 = completion / 1 = arrival, job)
    for j in jobs:
        heapq.heappush(events, (j.arrival_s, 1, j.job_id))
    queued: set[str] = set()
    running: dict[str, tuple[tuple[int, ...], float]] = {}  # job -> (GPUs, start)
    history: dict[str, list[float]] = {}  # class -> durations of its finished jobs
    guesses: dict[str, float] = {}  # class -> learned estimate, as of this pass
    window = queue_window(GPUS)
    end = 0.0
    big_wait = 0.0

    def estimate(j: SimJob) -> float | None:
        if estimates == "learned":
            return guesses.get(j.klass)
        return {"none": None, "exact": j.duration_s, "timeout": j.estimate_s}[estimates]

    def learned_guesses(classes: list[str]) -> dict[str, float]:
        known = {}
        for k in set(classes):
            est = learned_estimate(history.get(k, [])[-RECENT:])
            if est is not None:
                known[k] = est
        return with_prior(known, classes)

    def queued_job(j: SimJob) -> QueuedJob:
        est = estimate(j)
        learned = estimates == "learned" and est is not None
        return QueuedJob(
            j.job_id, j.gpus, 1, seq[j.job_id], j.arrival_s, duration_est_s=est, learned=learned
        )

    def running_job(job_id: str) -> RunningJob:
        gpus, start = running[job_id]
        est = estimate(by_id[job_id])
        return RunningJob(
            job_id,
            gpus,
            1,
            False,
            start,
            expected_end=None if est is None else start + est,
            end_guessed=estimates == "learned" and est is not None,
        )

    while events:
        now = events[0][0]
        while events and events[0][0] == now:  # every event at this instant, then one pass
            _, kind, job_id = heapq.heappop(events)
            j = by_id[job_id]
            if kind == 1:
                queued.add(job_id)
            else:
                del running[job_id]
                history.setdefault(j.klass, []).append(j.duration_s)
                end = max(end, now)
        order = sorted(queued, key=seq.__getitem__)
        if estimates == "learned":  # as the pass: the head of the queue and the running jobs
            guesses = learned_guesses([by_id[i].klass for i in order[:window] + list(running)])
        q = [queued_job(by_id[i]) for i in order]
        starts = policy(q, [running_job(i) for i in running], now)
        held = {g for gpus, _ in running.values() for g in gpus}
        for job_id, gpus in starts:
            assert len(gpus) == by_id[job_id].gpus and not held & set(gpus), "GPU given twice"
            held |= set(gpus)
            queued.remove(job_id)
            j = by_id[job_id]
            running[job_id] = (gpus, now)
            if j.gpus == GPUS:
                big_wait = max(big_wait, now - j.arrival_s)
            heapq.heappush(events, (now + j.duration_s, 0, job_id))
        # A job that cannot start waits for the next completion: the queue only
        # drains, the scheduler is called again then.
    assert not queued and not running, "jobs left over: the scheduler starved someone"
    return SimResult(end - min(j.arrival_s for j in jobs), big_wait)


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


LABELS = {
    "fifo": "strict FIFO",
    "none": "air, no estimates",
    "bypass": f"air, no estimates, bypass <= {BYPASS}",
    "learned": "air, learned estimates (EASY)",
    "exact": "air, exact estimates (EASY)",
    "timeout": "air, timeouts 1-3x (EASY)",
}
# (row label, workload, arrivals, the rows measured on it)
SCENARIOS = (
    ("burst", workload, "burst", ("fifo", "none", "bypass", "exact", "timeout")),
    ("poisson", workload, "poisson", ("fifo", "none", "bypass", "exact", "timeout")),
    ("classes, burst", class_workload, "burst", ("fifo", "none", "learned", "exact")),
    ("classes, poisson", class_workload, "poisson", ("fifo", "none", "learned", "exact")),
)


def run_row(jobs: list[SimJob], key: str) -> SimResult:
    if key == "fifo":
        return simulate(jobs, fifo_policy())
    if key == "bypass":
        return simulate(jobs, air_policy("none", BYPASS))
    return simulate(jobs, air_policy(key), key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--classes", type=int, default=CLASSES, help="job classes (classes rows)")
    args = parser.parse_args(argv)

    rows = []
    mean: dict[str, float] = {}
    for name, make, pattern, keys in SCENARIOS:
        ratios: dict[str, list[float]] = {k: [] for k in keys}
        waits: dict[str, float] = dict.fromkeys(keys, 0.0)
        for seed in range(args.seeds):
            jobs = (
                class_workload(args.jobs, seed, pattern, args.classes)
                if make is class_workload
                else make(args.jobs, seed, pattern)
            )
            bound = lower_bound(jobs)
            for key in keys:
                res = run_row(jobs, key)
                ratios[key].append(res.makespan_s / bound)
                waits[key] = max(waits[key], res.big_wait_s)
        for key in keys:
            values = ratios[key]
            goal = [f"<= {GOAL}", verdict(statistics.mean(values), GOAL, False)]
            rows.append(
                [name, LABELS[key], statistics.mean(values), min(values), max(values)]
                + [waits[key] / 60]
                + (goal if key != "fifo" else ["", ""])
            )
            mean[f"{name}/{key}"] = statistics.mean(values)

    print(
        f"{args.jobs} jobs of 1/2/4/8 GPUs (60/25/10/5%), lognormal durations (median"
        f" {MEDIAN_S:.0f} s, sigma {SIGMA}), {GPUS} GPUs, seeds 0-{args.seeds - 1}; classes:"
        f" {args.classes} job classes, each job its class's duration x lognormal(sigma"
        f" {CLASS_NOISE})\n"
        "makespan / lower bound (max(sum gpu*duration / 8, max arrival+duration)); big wait:"
        " the longest wait of an 8-GPU job over all seeds\n"
    )
    header = ["arrivals", "scheduler", "mean", "min", "max", "big wait (min)", "goal", ""]
    print(table(header, rows))
    for pattern in ("burst", "poisson"):
        print(
            f"\n{pattern}: air {mean[f'{pattern}/none']:.3f} (no estimates),"
            f" {mean[f'{pattern}/bypass']:.3f} (bypass <= {BYPASS}),"
            f" {mean[f'{pattern}/timeout']:.3f} (timeouts) vs FIFO {mean[f'{pattern}/fifo']:.3f}"
        )
        k = f"classes, {pattern}"
        print(
            f"{k}: air {mean[f'{k}/learned']:.3f} (learned estimates),"
            f" {mean[f'{k}/none']:.3f} (none), {mean[f'{k}/exact']:.3f} (oracle)"
            f" vs FIFO {mean[f'{k}/fifo']:.3f}"
        )
    extra = quota_lines()
    if extra:
        print()
        print("\n".join(extra))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
