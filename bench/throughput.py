"""Throughput: N ``/bin/true`` jobs of 1 GPU through 8 simulated GPUs, in jobs per second.

Two figures, each as a ratio to a raw pool of 8 concurrent ``subprocess.Popen`` of
``/bin/true``, refilled as they finish (measured before and after ours, in the same run):

- **runtime**: N jobs already queued (launched while every GPU was cordoned), then the GPUs
  are uncordoned; from the first uncordon to the last job's recorded end. What each job costs
  the runtime: its supervisor, the state store, the scheduling pass after each exit.
  Goal: at least 0.5x the raw pool.
- **end to end**: N ``Client.launch`` calls one after another, from the first call to the
  last job's end: the launch calls (a millisecond or two of Python each) count too.

Each of ours is compared with the mean of the raw runs just before and after it. On a shared
machine the raw pool's rate moves with the load (one process, it loses the most when other
processes compete for the cores), so quote a ratio with the load it ran under.

    python bench/throughput.py            # 1,000 jobs
    python bench/throughput.py --n 200    # quicker
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import time
from pathlib import Path

from _common import scratch_home, table, verdict

GOAL = 0.5
WIDTH = 8
COMMAND = ["/bin/true"]


def raw_pool(n: int, width: int = WIDTH) -> float:
    """Seconds for ``n`` runs of the command, ``width`` at a time, refilled as they finish."""
    t0 = time.perf_counter()
    running: dict[int, subprocess.Popen[bytes]] = {}
    started = done = 0
    while done < n:
        while started < n and len(running) < width:
            proc = subprocess.Popen(COMMAND, stdin=subprocess.DEVNULL)
            running[proc.pid] = proc
            started += 1
        pid, status = os.wait()
        proc = running.pop(pid, None)
        if proc is not None:
            proc.returncode = os.waitstatus_to_exitcode(status)
            done += 1
    return time.perf_counter() - t0


def _terminal_count(db: Path) -> tuple[int, float | None, int]:
    conn = sqlite3.connect(db, timeout=60)
    try:
        n, last, ok = conn.execute(
            "SELECT count(*), max(ended_at), sum(status='SUCCEEDED') FROM jobs"
            " WHERE status IN ('SUCCEEDED','FAILED','CANCELLED','TIMED_OUT')"
        ).fetchone()
    finally:
        conn.close()
    return n, last, ok or 0


def max_overlap(db: Path) -> int:
    """The most jobs that ever ran at once, from the records' start and end times."""
    conn = sqlite3.connect(db, timeout=60)
    try:
        spans = conn.execute("SELECT started_at, ended_at FROM jobs").fetchall()
    finally:
        conn.close()
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    best = cur = 0
    for _, d in edges:
        cur += d
        best = max(best, cur)
    return best


def _wait_done(db: Path, base: int, n: int, timeout_s: float) -> tuple[float, int]:
    """(time of the last job's recorded end, jobs that succeeded) once ``n`` more have ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, last, ok = _terminal_count(db)
        if done - base >= n:
            assert last is not None
            return last, ok
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done - base} of {n} jobs ended within {timeout_s}s")
        time.sleep(0.01)


def air_end_to_end(client: object, n: int, db: Path, timeout_s: float) -> tuple[float, float, int]:
    """(seconds from the first launch to the last end, seconds in launch calls, succeeded)."""
    from air_skills import JobSpec

    spec = JobSpec(command=COMMAND, gpus=1, track=False, name="bench-true")
    base, _, ok0 = _terminal_count(db)
    t0 = time.time()
    for _ in range(n):
        client.launch(spec)  # type: ignore[attr-defined]
    launched = time.time() - t0
    last, ok = _wait_done(db, base, n, timeout_s)
    return last - t0, launched, ok - ok0


def air_runtime(client: object, n: int, db: Path, timeout_s: float) -> tuple[float, int]:
    """(seconds from releasing N queued jobs to the last end, succeeded)."""
    from air_skills import JobSpec

    spec = JobSpec(command=COMMAND, gpus=1, track=False, name="bench-true")
    for i in range(WIDTH):
        client.cordon(i, "bench: hold the queue")  # type: ignore[attr-defined]
    for _ in range(n):
        client.launch(spec)  # type: ignore[attr-defined]
    base, _, ok0 = _terminal_count(db)
    t0 = time.time()
    for i in range(WIDTH):
        client.uncordon(i)  # type: ignore[attr-defined]
    last, ok = _wait_done(db, base, n, timeout_s)
    return last - t0, ok - ok0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="jobs (default 1000)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after (s)")
    args = parser.parse_args(argv)

    load = os.getloadavg()[0]
    with scratch_home(gpus=WIDTH, AIR_GRACE_S="2") as home:
        from air_skills import Client, JobSpec

        client = Client(home)
        db = home / "air.db"
        warm = [client.launch(JobSpec(command=COMMAND, gpus=1, track=False)) for _ in range(8)]
        client.wait([w.job_id for w in warm], timeout_s=60, any=False)
        raws = [raw_pool(args.n)]
        run_s, run_ok = air_runtime(client, args.n, db, args.timeout)
        raws.append(raw_pool(args.n))
        e2e_s, launch_s, e2e_ok = air_end_to_end(client, args.n, db, args.timeout)
        raws.append(raw_pool(args.n))
        overlap = max_overlap(db)

    def rate(seconds: float) -> float:
        return args.n / seconds

    raw_run, raw_e2e = (raws[0] + raws[1]) / 2, (raws[1] + raws[2]) / 2
    run_ratio, e2e_ratio = rate(run_s) / rate(raw_run), rate(e2e_s) / rate(raw_e2e)
    print(
        f"{args.n} x {' '.join(COMMAND)} on {WIDTH} (simulated) GPUs; {os.cpu_count()} cores,"
        f" load average {load:.1f} when it began\n"
    )
    rows: list[list[object]] = [
        ["raw Popen pool of 8 (runs around ours)", args.n, raw_run, rate(raw_run), 1.0, ""],
        ["air runtime (queued -> done)", args.n, run_s, rate(run_s), run_ratio, f">= {GOAL}"],
        ["raw Popen pool of 8 (runs around ours)", args.n, raw_e2e, rate(raw_e2e), 1.0, ""],
        ["air end to end (launch calls too)", args.n, e2e_s, rate(e2e_s), e2e_ratio, ""],
    ]
    print(table(["path", "jobs", "seconds", "jobs/s", "ratio", "goal"], rows))
    print(
        f"\nsucceeded: {run_ok}/{args.n} and {e2e_ok}/{args.n}; the launch calls took"
        f" {launch_s:.2f} s ({launch_s / args.n * 1000:.2f} ms each); at most {overlap} jobs ran"
        f" at once (limit {WIDTH}); raw pool runs: {', '.join(f'{r:.2f} s' for r in raws)}"
    )
    print(
        f"runtime ratio to the raw pool: {run_ratio:.2f}x; goal >= {GOAL}x:"
        f" {verdict(run_ratio, GOAL, True)}; end to end: {e2e_ratio:.2f}x"
    )
    return 0 if run_ok == e2e_ok == args.n and overlap <= WIDTH else 1


if __name__ == "__main__":
    raise SystemExit(main())
