"""Many agents on one pool (issue 29): what the duplicate check saves, and what it costs.

1. Jobs run and GPU-seconds: 4 simulated agents (threads, each a ``Client`` acting for its own
   identity, as air-mcp's HTTP callers do; the HTTP path itself is tested in
   tests/mcp_server/agents/test_shared_pool.py) each want 20 configs, overlapping (agent i
   wants configs 5i .. 5i+19 of 35), launched at once; with AIR_DEDUP=identities (the default)
   and AIR_DEDUP=off. Goal: with the check, jobs run == distinct configs.
2. Launch latency at 10,000 jobs in the home (seeded with SQL inserts of finished rows, each
   with its own run and near key): ``Client.launch`` of distinct configs with the check
   (``allow_duplicate=false``) and without it, alternated (on-off, then off-on), each job
   waited for before the next launch; and the check's own index look-up. Goal: p50 at most
   1.1x. On a loaded machine the launch itself varies far more than the look-up costs: read
   the look-up's microseconds beside the ratio.

``.venv/bin/python bench/agents.py [--agents 4] [--configs 20] [--job-s 0.5] [--launches 30]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from _common import percentile, scratch_home, table, verdict

from air_skills import Client, JobSpec
from air_skills.errors import AirError
from air_skills.runtime.store.identities import Identity

SEEDED = 10_000


def job_spec(n: int, job_s: float) -> JobSpec:
    code = f"import time; time.sleep({job_s}); print('---'); print('val_loss: {1 / (n + 1)}')"
    return JobSpec(
        command=[sys.executable, "-S", "-c", code],
        config={"lr": round(0.001 * (n + 1), 6), "seed": 0},
        gpus=1,
        track=False,
        code="live",
    )


def agents_round(agents: int, configs: int, job_s: float, dedup: str) -> tuple[int, int, float]:
    """(asked, jobs run, GPU-seconds) of ``agents`` agents wanting overlapping configs."""
    with scratch_home(gpus=8, AIR_DEDUP=dedup):
        client = Client()
        names = [f"agent-{a}" for a in range(agents)]
        for name in names:
            client.add_identity(name, "lab")
        wants = [(name, n) for a, name in enumerate(names) for n in range(5 * a, 5 * a + configs)]

        def launch(want: tuple[str, int]) -> str | None:
            name, n = want
            me = client.as_identity(Identity(name, "lab"))
            try:
                return me.launch(job_spec(n, job_s)).job_id
            except AirError as exc:
                if exc.code != "duplicate":
                    raise
                return None

        with ThreadPoolExecutor(agents) as pool:
            ids = [i for i in pool.map(launch, wants) if i]
        done = client.wait(ids, timeout_s=600, any=False)
        gpu_s = sum(
            (j.ended_at - j.started_at).total_seconds() * 1
            for j in done
            if j.started_at and j.ended_at
        )
        return len(wants), len(ids), gpu_s


def seed_jobs(client: Client, n: int) -> None:
    """``n`` finished jobs, inserted in one transaction (distinct run and near keys)."""
    now = time.time()
    rows = []
    for i in range(n):
        key = hashlib.sha256(f"seed-{i}".encode()).hexdigest()[:32]
        spec = {"command": ["python", "train.py"], "config": {"lr": i / n, "seed": i}}
        rows.append(
            (
                f"job-s{i:09x}",
                "seeded",
                json.dumps(spec),
                "SUCCEEDED",
                1,
                0,
                now,
                now,
                now,
                now,
                "bench",
                key,
                key[::-1],
            )  # fmt: skip
        )
    with client.store.tx() as c:
        c.executemany(
            "INSERT INTO jobs (job_id, name, spec, status, priority, gpus_requested, created_at,"
            " queued_at, started_at, ended_at, launched_by, run_key, near_key)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )


def latency(launches: int) -> tuple[list[float], list[float], float]:
    """Launch seconds with and without the check, alternated, at SEEDED jobs; and the check's
    own query time (microseconds, the mean of 1,000)."""
    from air_skills.runtime.store import dedup

    with scratch_home(gpus=8):
        client = Client()
        seed_jobs(client, SEEDED)
        on: list[float] = []
        off: list[float] = []
        for i in range(2 * launches + 2):
            check = (i % 2 == 0) == (i // 2 % 2 == 0)  # on-off, then off-on: no order bias
            spec = JobSpec(
                command=[sys.executable, "-S", "-c", "pass"],
                config={"lr": 1 + i, "seed": i},
                track=False,
                code="live",
                allow_duplicate=not check,
            )
            started = time.perf_counter()
            job = client.launch(spec)
            took = time.perf_counter() - started
            client.wait([job.job_id], timeout_s=60)  # the next launch meets an idle machine
            if i >= 2:  # the first of each: imports and warm-up
                (on if check else off).append(took)
        conn = client.store.conn
        started = time.perf_counter()
        for i in range(1000):
            dedup.same_run(conn, f"{i:032x}")
        query_us = (time.perf_counter() - started) * 1000
        return on, off, query_us


def agents_part(args: argparse.Namespace, distinct: int) -> None:
    """The agents' round with the check and without: jobs run and GPU-seconds."""
    rows = []
    results = {}
    for mode in ("identities", "off"):
        asked, ran, gpu_s = agents_round(args.agents, args.configs, args.job_s, mode)
        results[mode] = (ran, gpu_s)
        rows.append([f"AIR_DEDUP={mode}", asked, distinct, ran, gpu_s])
    print(table(["agents' launches", "asked", "distinct", "jobs run", "GPU-s"], rows))
    ran, gpu_s = results["identities"]
    saved = 1 - gpu_s / results["off"][1] if results["off"][1] else 0.0
    print(
        f"jobs run == distinct configs: {'meets' if ran == distinct else 'MISSES'}"
        f" ({ran} vs {distinct}); GPU-seconds saved by the check: {saved:.0%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--configs", type=int, default=20)
    ap.add_argument("--job-s", type=float, default=0.5)
    ap.add_argument("--launches", type=int, default=30)
    ap.add_argument("--latency-only", action="store_true", help="skip the agents' round")
    args = ap.parse_args()
    distinct = 5 * (args.agents - 1) + args.configs
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if not args.latency_only:
        agents_part(args, distinct)
    on, off, query_us = latency(args.launches)
    p50 = percentile(on, 50) / percentile(off, 50)
    p95 = percentile(on, 95) / percentile(off, 95)
    print(
        table(
            [f"launch at {SEEDED:,} jobs", "p50 ms", "p95 ms"],
            [
                ["duplicate check on", percentile(on, 50) * 1e3, percentile(on, 95) * 1e3],
                ["check off", percentile(off, 50) * 1e3, percentile(off, 95) * 1e3],
                ["ratio", p50, p95],
            ],
        )
    )
    print(f"p50 ratio {p50:.3f}x (goal 1.1x): {verdict(p50, 1.1, higher_is_better=False)}")
    print(f"the check's own index look-up: {query_us:.1f} us (mean of 1,000)")


if __name__ == "__main__":
    main()
