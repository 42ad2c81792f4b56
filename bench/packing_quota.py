"""Quotas: two projects with bursty arrivals on 8 GPUs, borrowing against strict quotas.

The pure scheduler on a virtual clock. Projects A and B have a quota of 4 GPUs each. Each
sends bursts of jobs (a burst: 8-24 jobs within 10 minutes; bursts a Poisson stream, A's
every 6 h on average and B's every 10 h, over 48 h); jobs need 1/2/4 GPUs (50/35/15%) and run
for lognormal durations (median 30 min). Offered load: about 2/3 of the pool on average,
far beyond a project's quota during its bursts.

- **borrowing**: one pool of 8 GPUs, ``Inventory.quotas = {A: 4, B: 4}``. A job beyond its
  project's quota runs on idle GPUs; when the owner needs them it is preempted and requeued.
  A preempted job resumes from its last checkpoint (every 10 minutes) after a 30 s restart:
  the work since that checkpoint is lost, and counted.
- **strict**: the same scheduler on two separate pools of 4 GPUs, one per project (quotas
  without borrowing: idle GPUs of one project are never lent to the other).

Figures, as ratios borrowing / strict: GPU utilisation (useful GPU-time in the 48 h window /
8 x 48 h, work lost to preemption not counted), makespan, and each project's mean and p95
wait (completion - arrival - work: time in the queue plus work lost and restarts).

    python bench/packing_quota.py                 # 5 seeds
    python bench/packing_quota.py --seeds 20

``lines(seeds)`` returns the report as lines, for ``bench/packing.py``.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
from dataclasses import dataclass, field

from _common import percentile, table

from air_skills.runtime.scheduling.scheduler import Inventory, QueuedJob, RunningJob, schedule

GPUS = 8
QUOTAS = {"A": 4, "B": 4}
BURST_GAP_H = {"A": 6.0, "B": 10.0}  # mean time between a project's bursts
BURST_JOBS = (8, 24)
BURST_SPREAD_S = 600.0
HORIZON_S = 48 * 3600.0
SIZES = ((1, 0.50), (2, 0.35), (4, 0.15))
MEDIAN_S = 1800.0
SIGMA = 0.8
CHECKPOINT_S = 600.0
RESTART_S = 30.0


@dataclass(frozen=True)
class SimJob:
    job_id: str
    project: str
    gpus: int
    work_s: float
    arrival_s: float


@dataclass
class Outcome:
    end_s: dict[str, float] = field(default_factory=dict)  # job -> completion time
    useful_in_window: float = 0.0  # GPU-seconds of kept work done before HORIZON_S
    lost_gpu_s: float = 0.0
    preemptions: int = 0


def workload(seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    sizes = [s for s, _ in SIZES]
    weights = [w for _, w in SIZES]
    jobs: list[SimJob] = []
    for project, gap_h in BURST_GAP_H.items():
        t = rng.expovariate(1 / (gap_h * 3600))
        while t < HORIZON_S:
            for _ in range(rng.randint(*BURST_JOBS)):
                jobs.append(
                    SimJob(
                        f"{project}{len(jobs):04d}",
                        project,
                        rng.choices(sizes, weights)[0],
                        rng.lognormvariate(math.log(MEDIAN_S), SIGMA),
                        t + rng.uniform(0, BURST_SPREAD_S),
                    )
                )
            t += rng.expovariate(1 / (gap_h * 3600))
    jobs.sort(key=lambda j: j.arrival_s)
    return jobs


def simulate(jobs: list[SimJob], gpus: tuple[int, ...], quotas: dict[str, int]) -> Outcome:
    """Run ``jobs`` on ``gpus`` with the pure scheduler; preempted jobs resume from checkpoints."""
    inv = Inventory(gpus=gpus, cpu_slots=1, quotas=quotas)
    by_id = {j.job_id: j for j in jobs}
    seq = {j.job_id: i for i, j in enumerate(jobs)}
    remaining = {j.job_id: j.work_s for j in jobs}
    attempt = {j.job_id: 0 for j in jobs}
    events: list[tuple[float, int, str, int]] = []  # (time, 0 end / 1 arrival, job, attempt)
    for j in jobs:
        heapq.heappush(events, (j.arrival_s, 1, j.job_id, 0))
    queued: dict[str, QueuedJob] = {}
    running: dict[str, RunningJob] = {}
    out = Outcome()

    def credit(job_id: str, start: float, kept: float) -> None:
        """Useful GPU-seconds of ``kept`` work begun at ``start`` that fall in the window."""
        begin = start + (RESTART_S if attempt[job_id] > 1 else 0.0)
        inside = max(0.0, min(begin + kept, HORIZON_S) - begin)
        out.useful_in_window += by_id[job_id].gpus * min(kept, inside)

    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, job_id, n = heapq.heappop(events)
            j = by_id[job_id]
            if kind == 1:
                queued[job_id] = QueuedJob(
                    job_id, j.gpus, 1, seq[job_id], j.arrival_s, project=j.project
                )
            elif n == attempt[job_id] and job_id in running:  # not a preempted attempt
                r = running.pop(job_id)
                credit(job_id, r.started_at, remaining[job_id])
                remaining[job_id] = 0.0
                out.end_s[job_id] = now
        for _ in range(10):  # a pass; again at once if it preempted (reclaimed GPUs go now)
            d = schedule(list(queued.values()), list(running.values()), inv, now)
            for job_id, borrowing in d.relabels.items():
                r = running[job_id]
                running[job_id] = RunningJob(
                    r.job_id, r.gpus, r.priority, r.preemptible, r.started_at, r.project,
                    borrowing,
                )  # fmt: skip
            for job_id in d.preempts:
                # One priority, nothing preemptible: every preemption is a quota reclaim.
                assert "reclaimed its GPU quota" in d.preempt_reasons[job_id]
                r = running.pop(job_id)
                overhead = RESTART_S if attempt[job_id] > 1 else 0.0
                done = max(0.0, now - r.started_at - overhead)
                kept = min(remaining[job_id], math.floor(done / CHECKPOINT_S) * CHECKPOINT_S)
                credit(job_id, r.started_at, kept)
                out.lost_gpu_s += len(r.gpus) * (now - r.started_at - kept)
                out.preemptions += 1
                remaining[job_id] -= kept
                j = by_id[job_id]
                queued[job_id] = QueuedJob(
                    job_id, j.gpus, 1, seq[job_id], j.arrival_s, project=j.project
                )
            held = {g for r in running.values() for g in r.gpus}
            for s in d.starts:
                assert not held & set(s.gpus), "GPU given twice"
                held |= set(s.gpus)
                queued.pop(s.job_id)
                attempt[s.job_id] += 1
                run_s = remaining[s.job_id] + (RESTART_S if attempt[s.job_id] > 1 else 0.0)
                running[s.job_id] = RunningJob(
                    s.job_id, s.gpus, 1, False, now, by_id[s.job_id].project, s.borrowing
                )
                heapq.heappush(events, (now + run_s, 0, s.job_id, attempt[s.job_id]))
            if not d.preempts:
                break
    assert not queued and not running, "jobs left over: the scheduler starved someone"
    return out


def run_seed(seed: int) -> dict[str, dict[str, float]]:
    """Both modes on one workload: {mode: figures}."""
    jobs = workload(seed)
    shared = simulate(jobs, tuple(range(GPUS)), QUOTAS)
    strict = Outcome()
    for project, quota in QUOTAS.items():  # one pool of its own quota per project
        part = simulate([j for j in jobs if j.project == project], tuple(range(quota)), {})
        strict.end_s.update(part.end_s)
        strict.useful_in_window += part.useful_in_window
    figures = {}
    for mode, o in (("borrowing", shared), ("strict", strict)):
        f = {
            "util": o.useful_in_window / (GPUS * HORIZON_S),
            "makespan_h": max(o.end_s.values()) / 3600,
            "preemptions": float(o.preemptions),
            "lost_pct": 100 * o.lost_gpu_s / sum(j.gpus * j.work_s for j in jobs),
        }
        for project in QUOTAS:
            waits = [
                (o.end_s[j.job_id] - j.arrival_s - j.work_s) / 60
                for j in jobs
                if j.project == project
            ]
            f[f"{project}_mean"] = statistics.mean(waits)
            f[f"{project}_p95"] = percentile(waits, 95)
        figures[mode] = f
    figures["load"] = {"util": sum(j.gpus * j.work_s for j in jobs) / (GPUS * HORIZON_S)}
    figures["jobs"] = {p: float(sum(j.project == p for j in jobs)) for p in QUOTAS}
    return figures


def lines(seeds: int = 5) -> list[str]:
    """The report: each figure with borrowing and strict quotas side by side, and the ratio."""
    runs = [run_seed(s) for s in range(seeds)]

    def mean(mode: str, key: str) -> float:
        return statistics.mean(r[mode][key] for r in runs)

    rows = []
    for key, label, better in (
        ("util", "GPU utilisation (useful, 48 h window)", "higher"),
        ("makespan_h", "makespan (h)", "lower"),
        ("A_mean", "project A mean wait (min)", "lower"),
        ("B_mean", "project B mean wait (min)", "lower"),
        ("A_p95", "project A p95 wait (min)", "lower"),
        ("B_p95", "project B p95 wait (min)", "lower"),
    ):
        b, s = mean("borrowing", key), mean("strict", key)
        rows.append([label, s, b, b / s if s else math.nan, f"{better} is better"])
    n_a = statistics.mean(r["jobs"]["A"] for r in runs)
    n_b = statistics.mean(r["jobs"]["B"] for r in runs)
    return [
        f"quota scenario: projects A and B, quota 4 GPUs each, {GPUS} GPUs, seeds 0-{seeds - 1}",
        f"bursts of {BURST_JOBS[0]}-{BURST_JOBS[1]} jobs (A every {BURST_GAP_H['A']:.0f} h,"
        f" B every {BURST_GAP_H['B']:.0f} h on average) over {HORIZON_S / 3600:.0f} h:"
        f" {n_a:.0f} + {n_b:.0f} jobs of 1/2/4 GPUs, offered load {mean('load', 'util'):.0%}",
        "strict: each project on its own 4 GPUs; borrowing: idle GPUs lent, reclaimed by",
        f"preemption (checkpoint every {CHECKPOINT_S / 60:.0f} min, {RESTART_S:.0f} s restart)",
        "",
        *table(["", "strict", "borrowing", "borrowing / strict", ""], rows).splitlines(),
        "",
        f"borrowing cost: {mean('borrowing', 'preemptions'):.1f} preemptions per run,"
        f" {mean('borrowing', 'lost_pct'):.2f}% of the GPU-time of the work lost to them",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    print("\n".join(lines(args.seeds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
