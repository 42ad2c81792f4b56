"""1,000 jobs from one `air launch` sweep (issue 41.2): seconds to queued, and `air cancel` of
the batch, each from a fresh process, against the same 1,000 as ten MCP-sized calls of 100
(`Client.launch_many`, the path launch_jobs takes) and cancelling them job by job.

Goals (issue 41): 1,000 queued in at most 10 s; cancel of 1,000 in at most 2 s. With
``--settle N`` only: N trivial tracked jobs from one sweep, launch to all settled (run ended,
result indexed).

    .venv/bin/python bench/sweep.py [--jobs 1000]
    .venv/bin/python bench/sweep.py --settle 1200
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, scratch_home, table, verdict

AIR = [str(Path(sys.executable).with_name("air"))]
JOB = [sys.executable, "-S", "-c", "import time; time.sleep(600)"]  # holds its GPU: the rest queue


def _run(argv: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, done.stdout + done.stderr


def _statuses(cwd: Path) -> dict[str, int]:
    out = subprocess.run(
        [*AIR, "ls", "--limit", "1000", "--json"], cwd=cwd, capture_output=True, text=True
    ).stdout
    counts: dict[str, int] = {}
    for job in json.loads(out or "[]"):
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    return counts


def sweep(
    n: int, work: Path, hold: bool = False
) -> tuple[float, float, dict[str, int], dict[str, int]]:
    """One `air launch --seeds 0,...` of n jobs, then `air cancel BATCH`: (s, s, statuses).
    ``hold``: the 4 GPUs are held by other jobs first, so all n queue (the cancel then ends
    queued jobs only; otherwise it also waits for the 4 running ones to end)."""
    if hold:
        for _ in range(4):
            _run([*AIR, "launch", "--gpus", "1", "--", *JOB], work)
    seeds = ",".join(map(str, range(n)))
    took, text = _run([*AIR, "launch", "--gpus", "1", "--seeds", seeds, "--", *JOB], work)
    batch = re.findall(r"batch-[0-9a-z]+", text)[-1]
    queued = _statuses(work)
    cancel_s, _ = _run([*AIR, "cancel", batch], work)
    return took, cancel_s, queued, _statuses(work)


def running_cancel(work: Path, n: int = 4, hold_s: float = 3.0) -> tuple[float, list[float]]:
    """A sweep of ``n`` jobs that all run (one GPU each), cancelled once each has run
    ``hold_s``: `air cancel BATCH`'s seconds, and each job's stop request to its CANCELLED
    record (the events 'stop-cancel' -> 'cancelled' in air.db), in seconds. Past the home's
    writer's idle linger (10 s in a scratch home) the writer has exited: the jobs of a long
    run end with no writer running."""
    _, text = _run([*AIR, "launch", "--gpus", "1", "--seeds", ",".join(map(str, range(n))),
                    "--", *JOB], work)  # fmt: skip
    batch = re.findall(r"batch-[0-9a-z]+", text)[-1]
    db = sqlite3.connect(Path(os.environ["AIR_HOME"]) / "air.db")
    deadline = time.monotonic() + 300
    # Their commands run (a fresh home's first jobs wait for their MLflow runs to be made).
    running = "SELECT count(*) FROM jobs WHERE status='RUNNING' AND job_pid IS NOT NULL"
    while db.execute(running).fetchone()[0] < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"the {n} jobs never all ran: {_statuses(work)}")
        time.sleep(0.2)
    time.sleep(hold_s)  # the jobs run: their runs completed, their supervisors watching
    cancel_s, _ = _run([*AIR, "cancel", batch], work)
    try:
        events = db.execute(
            "SELECT job_id, kind, ts FROM events WHERE kind IN ('stop-cancel', 'cancelled')"
        ).fetchall()
    finally:
        db.close()
    asked = {j: ts for j, kind, ts in events if kind == "stop-cancel"}
    ended = {j: ts for j, kind, ts in events if kind == "cancelled"}
    return cancel_s, [ended[j] - asked[j] for j in asked if j in ended]


def calls_of_100(n: int, work: Path) -> tuple[float, float]:
    """The same n jobs as n/100 launch_many calls of 100 (an agent's MCP path), then each
    job cancelled by its id (no batch): the baseline."""
    code = f"""
import sys, time
from air_skills import Client
from air_skills.batch import expand
c = Client()
c.runtime.keep_spares = True  # as air-mcp's long-lived client: runs left to supervisors
c.runtime.make_runs_here = False
spec = {{"command": {JOB!r}, "gpus": 1, "workdir": {str(work)!r}}}
t = time.perf_counter()
ids = []
for start in range(0, {n}, 100):
    items = expand(spec, list(range(start, min(start + 100, {n}))))
    ids += [i.job_id for i in c.launch_many(items)]
launched = time.perf_counter() - t
t = time.perf_counter()
for job_id in ids:
    c.cancel(job_id, wait_s=0)
print(launched, time.perf_counter() - t)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def settle(n: int, work: Path, home: Path) -> dict[str, float]:
    """``n`` trivial tracked jobs from one sweep (CPU slots, each printing its metric as a
    summary block): seconds from the command's start to every job settled with its run ended
    and its result indexed (the issue measured 1,200 in 146 s, 8.2 jobs/s)."""
    job = ["sh", "-c", "echo ---; echo loss: 1"]
    seeds = ",".join(map(str, range(n)))
    started = time.perf_counter()
    _run([*AIR, "launch", "--experiment", "settle", "--seeds", seeds, "--", *job], work)
    queued_s = time.perf_counter() - started
    db = sqlite3.connect(home / "air.db", timeout=60)
    sql = (
        "SELECT count(*) FROM jobs WHERE status IN ('SUCCEEDED','FAILED','CANCELLED','TIMED_OUT')"
        " AND (run_id IS NULL OR results_at IS NOT NULL)"
    )
    try:
        while db.execute(sql).fetchone()[0] < n:
            if time.perf_counter() - started > 1800:
                raise SystemExit("not settled in 30 minutes")
            time.sleep(0.2)
        took = time.perf_counter() - started
        ok = db.execute(
            "SELECT count(*) FROM jobs WHERE status = 'SUCCEEDED' AND run_id IS NOT NULL"
        ).fetchone()[0]
    finally:
        db.close()
    return {"jobs": n, "queued_s": queued_s, "settled_s": took, "jobs_per_s": n / took,
            "succeeded_with_run": ok}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument(
        "--running-only", action="store_true", help="only the cancel of 4 running jobs"
    )
    parser.add_argument(
        "--settle", type=int, default=0, help="only: N trivial tracked jobs, launch to settled"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-sweep-"))
    load = os.getloadavg()[0]
    if args.settle:
        with scratch_home(gpus=4, AIR_SANDBOX="off") as home:
            figures = settle(args.settle, work, home)
        print(f"load {load:.1f} -> {os.getloadavg()[0]:.1f}: {json.dumps(figures)}")
        return
    for hold_s in (3.0, 15.0):  # the writer warm; gone idle (a job that outlived it)
        with scratch_home(gpus=4, AIR_SANDBOX="off"):
            run_cancel_s, latencies = running_cancel(work, hold_s=hold_s)
        print(
            f"cancel of a sweep of 4 jobs running for {hold_s:.0f} s: {run_cancel_s:.2f} s;"
            f" stop request to CANCELLED per job:"
            f" {', '.join(f'{x:.2f}' for x in sorted(latencies))} s"
            f" (load {os.getloadavg()[0]:.1f})"
        )
    if args.running_only:
        return
    with scratch_home(gpus=4, AIR_SANDBOX="off"):
        took, cancel_s, queued, after = sweep(args.jobs, work)
    with scratch_home(gpus=4, AIR_SANDBOX="off"):
        held_took, held_cancel_s, held_queued, _ = sweep(args.jobs, work, hold=True)
        subprocess.run([*AIR, "cancel", "--all"], cwd=work, capture_output=True)
    with scratch_home(gpus=4, AIR_SANDBOX="off"):
        base_launch, base_cancel = calls_of_100(args.jobs, work)
    rows = [
        ["to queued (s)", took, base_launch, took / base_launch, 10.0, verdict(took, 10.0, False)],
        [
            "cancel (s)",
            cancel_s,
            base_cancel,
            cancel_s / base_cancel,
            2.0,
            verdict(cancel_s, 2.0, False),
        ],
        ["to queued, GPUs held (s)", held_took, base_launch, held_took / base_launch, 10.0,
         verdict(held_took, 10.0, False)],
        ["cancel, all queued (s)", held_cancel_s, base_cancel, held_cancel_s / base_cancel, 2.0,
         verdict(held_cancel_s, 2.0, False)],
    ]  # fmt: skip
    print(f"{args.jobs} jobs, 4 simulated GPUs, load {load:.1f} at the start")
    print(
        table(
            [
                "what",
                "one sweep",
                f"{args.jobs // 100} calls of 100",
                "ratio",
                "goal (s)",
                "verdict",
            ],
            rows,
        )
    )
    print(f"after the sweep: {queued}; after its cancel: {after}; GPUs held: {held_queued}")
    print(f"load at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
