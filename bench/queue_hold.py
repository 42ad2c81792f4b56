"""A queue that holds (issue 41.4): far more jobs queued than can run, on 8 simulated GPUs.

Rows, each printed with the load average:

- **pass**: one scheduling pass (``passes.run_pass``, inside its transaction, rolled back) with
  7 of 8 GPUs held and 100 / 5,000 jobs queued (1/2/4-GPU and CPU jobs), without and with a
  project quota (a quota made the pass read the whole queue). Goal: the time at 5,000 at most
  1.5x the time at 100 (no scan of the queue per event).
- **launch**: ``Client.launch`` of a 1-GPU job, p50, at 100 / 5,000 queued (every GPU held).
  Goal: at most 1.5x.
- **busy**: real ``sleep`` jobs of 1-4 s on 8 simulated GPUs, 5,000 queued by one
  ``launch_many`` while the GPUs are cordoned, then uncordoned and run for ``--busy-s``
  seconds: the GPU-busy fraction (GPU-seconds of the jobs' records over 8 x the seconds), and
  the fraction of samples (every 0.2 s) in which a GPU was idle while a queued job that fits
  in the idle GPUs waited. Workloads: ``fit`` (1- and 2-GPU jobs, no time limits) and
  ``blocked`` (200 jobs of 3 GPUs at the head, then 1-GPU jobs, every job with a 1-minute
  limit: two 3-GPU jobs leave 2 GPUs that only a 1-GPU job deep in the queue can use, which
  EASY backfill allows as they end before the head's next start).

    python bench/queue_hold.py                      # 100 / 5,000 queued, 60 s busy runs
    python bench/queue_hold.py --skip busy          # the in-process rows only
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import time
from pathlib import Path

from _common import scratch_home, table, verdict

GOAL_GROWTH = 1.5
WIDTH = 8


class _Rollback(Exception):
    pass


def _workdir() -> Path:
    """A small folder for the jobs to run in (a launch snapshots its workdir)."""
    path = Path(os.environ["AIR_HOME"]).parent / "work"
    path.mkdir(exist_ok=True)
    return path


def _fill(store: object, n: int, shapes: list[int], start: int = 0) -> list[str]:
    """``n`` queued jobs recorded as a launch records them (no folder work), shapes cycled."""
    from air_skills.models import JobSpec
    from air_skills.runtime.store.store import new_job_id

    home: Path = store.home  # type: ignore[attr-defined]
    ids = []
    with store.tx() as c:  # type: ignore[attr-defined]
        for i in range(start, start + n):
            spec = JobSpec(
                command=["true"], gpus=shapes[i % len(shapes)], track=False, sandbox="off"
            ).model_dump(mode="json")
            job_id = new_job_id()
            jdir = home / "jobs" / job_id
            jdir.mkdir(parents=True)
            store.queue(  # type: ignore[attr-defined]
                spec, job_id, str(jdir / "output.log"), f"q{i}", project="default", jdir=jdir,
                c=c,
            )  # fmt: skip
            ids.append(job_id)
    return ids


def _time_pass(store: object, reps: int = 25) -> tuple[float, int]:
    """Median ms of one pass (rolled back, so each sees the same queue) and its starts."""
    from air_skills.runtime.scheduling.passes import run_pass, schedulable_gpus

    gpus = schedulable_gpus(store)  # type: ignore[arg-type]
    times, starts = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        try:
            with store.tx() as c:  # type: ignore[attr-defined]
                starts = len(run_pass(store, c, gpus).started)  # type: ignore[arg-type]
                times.append(time.perf_counter() - t0)
                raise _Rollback
        except _Rollback:
            pass
    return statistics.median(times) * 1000, starts


def _time_launch(client: object, reps: int = 15) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        client.launch(  # type: ignore[attr-defined]
            {"command": ["true"], "gpus": 1, "track": False, "sandbox": "off",
             "workdir": str(_workdir())}
        )  # fmt: skip
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def pass_rows(sizes: list[int]) -> list[list[object]]:
    """Pass and launch cost at each queue size; GPUs held by records without processes."""
    from air_skills import Client

    rows = []
    with scratch_home(gpus=WIDTH, AIR_CPU_SLOTS="2"):
        client = Client()
        store = client.store
        held = _fill(store, WIDTH + 2, [1] * WIDTH + [0, 0])
        with store.tx() as c:
            for i, job_id in enumerate(held):
                store.mark_running(c, job_id, [i] if i < WIDTH else [], 1, False)
        done = 0
        for size in sizes:
            _fill(store, size - done, [4, 2, 1, 0, 1], start=done)
            launch_ms = _time_launch(client)
            done = size + 15
            with store.tx() as c:  # one GPU free: the pass after a job's end
                c.execute("UPDATE jobs SET status='SUCCEEDED' WHERE job_id=?", (held[0],))
            plain_ms, starts = _time_pass(store)
            with store.tx() as c:
                c.execute("INSERT OR REPLACE INTO quotas (project, gpus) VALUES ('default', 4)")
            quota_ms, quota_starts = _time_pass(store)
            with store.tx() as c:
                c.execute("DELETE FROM quotas")
                c.execute("UPDATE jobs SET status='RUNNING' WHERE job_id=?", (held[0],))
            rows.append([size, round(plain_ms, 2), starts, round(quota_ms, 2), quota_starts,
                         round(launch_ms, 1)])  # fmt: skip
    return rows


# --- GPU-busy ----------------------------------------------------------------------------------


def _specs(workload: str, n: int, rng: random.Random) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        secs = round(rng.uniform(1, 4), 2)
        if workload == "fit":
            gpus, limit = (1 if rng.random() < 0.7 else 2), None
        else:
            gpus, limit = (3 if i < 200 else 1), 1
        spec: dict[str, object] = {
            "command": ["sleep", str(secs)], "gpus": gpus, "track": False, "sandbox": "off",
            "allow_duplicate": True, "name": f"{workload}{i}", "workdir": str(_workdir()),
        }  # fmt: skip
        if limit:
            spec["timeout_min"] = limit
        out.append(spec)
    return out


def _idle_while_fits(db: Path) -> tuple[int, bool]:
    """(idle GPUs, whether a queued GPU job fits in them) now, from the records."""
    conn = sqlite3.connect(db, timeout=60)
    try:
        held = conn.execute(
            "SELECT coalesce(sum(json_array_length(gpus)), 0) FROM jobs WHERE status='RUNNING'"
        ).fetchone()[0]
        idle = WIDTH - held
        fits = (
            idle > 0
            and conn.execute(
                "SELECT 1 FROM jobs WHERE status='QUEUED' AND gpus_requested BETWEEN 1 AND ?"
                " LIMIT 1",
                (idle,),
            ).fetchone()
            is not None
        )
    finally:
        conn.close()
    return idle, fits


def busy(workload: str, queued: int, seconds: float) -> list[object]:
    """One busy row: the fraction of GPU-time used while ``queued`` jobs wait."""
    from air_skills import Client
    from air_skills.runtime.store import batches

    with scratch_home(gpus=WIDTH, AIR_GRACE_S="2") as home:
        client = Client()
        for i in range(WIDTH):
            client.cordon(i, "bench: hold the queue")
        t_q = time.perf_counter()
        specs = _specs(workload, queued, random.Random(41))
        batch = batches.new_batch_id()
        client.launch_many(specs, batch_id=batch, limit=len(specs))
        queue_s = time.perf_counter() - t_q
        t0 = time.time()
        for i in range(WIDTH):
            client.uncordon(i)
        samples = fit_idle = 0
        db = home / "air.db"
        warm = t0 + 3  # the first supervisors' start
        while time.time() < t0 + seconds:
            time.sleep(0.2)
            if time.time() < warm:
                continue
            idle, fits = _idle_while_fits(db)
            samples += 1
            fit_idle += fits
        t1 = time.time()
        conn = sqlite3.connect(db, timeout=60)
        try:
            spans = conn.execute(
                "SELECT started_at, coalesce(ended_at, ?), json_array_length(gpus) FROM jobs"
                " WHERE started_at IS NOT NULL AND gpus_requested > 0",
                (t1,),
            ).fetchall()
            ran = conn.execute("SELECT count(*) FROM jobs WHERE status='SUCCEEDED'").fetchone()[0]
        finally:
            conn.close()
        used = sum(n * max(0.0, min(e, t1) - max(s, warm)) for s, e, n in spans)
        frac = used / (WIDTH * (t1 - warm))
        client.cancel_batch(batch)
        client.cancel_all("bench done")
    return [workload, queued, round(queue_s, 1), ran, round(frac, 3),
            round(fit_idle / max(1, samples), 3)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="100,5000")
    ap.add_argument("--queued", type=int, default=5000, help="jobs queued for the busy rows")
    ap.add_argument("--busy-s", type=float, default=60.0)
    ap.add_argument("--workloads", default="fit,blocked")
    ap.add_argument("--skip", default="", help="comma-separated: pass,busy")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    print(f"load average: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})")
    if "pass" not in skip:
        rows = pass_rows([int(s) for s in args.sizes.split(",")])
        print(table(["queued", "pass ms", "starts", "pass ms, a quota", "starts",
                     "launch p50 ms"], rows))  # fmt: skip
        for col, what in ((1, "pass"), (3, "pass with a quota"), (5, "launch")):
            ratio = float(rows[-1][col]) / float(rows[0][col])  # type: ignore[arg-type]
            print(f"{what}: {ratio:.2f}x from {rows[0][0]} to {rows[-1][0]} queued; goal <="
                  f" {GOAL_GROWTH}x: {verdict(ratio, GOAL_GROWTH, False)}")  # fmt: skip
    if "busy" not in skip:
        rows = [busy(w, args.queued, args.busy_s) for w in args.workloads.split(",")]
        print(table(["workload", "queued", "to queued s", "succeeded", "GPU-busy",
                     "samples idle while a job fits"], rows))  # fmt: skip
        print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
