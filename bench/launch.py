"""Launch latency: ``Client.launch`` called -> first instruction of a ``python -S`` job.

The job writes ``time.time()`` to a file as its first statement. Raw ``subprocess.Popen`` of
the same command is measured side by side, interleaved in the same run, and each of our rows
is given as a ratio to it. Goal: p50 and p95 at most 1.25x raw.

Rows: launches one after another (the usual case: a supervisor whose job ended waits a while
and the next launch hands it the job, so no process is created on the critical path); the
same with MLflow tracking on, the run made in the launching process (the Python API with no
spare run) and, goal 2 (at most 1.5x raw), claimed from the spare runs as a long-lived
launcher that keeps them does (runtime/runs/spare_runs.py), back to back and again with the pool
refilled before each launch (a job that outlives its supervisor's MLflow work, as training
runs do: that work then competes with no launch for the cores); cold launches, where no supervisor
is waiting (a fresh AIR_HOME whose supervisors exit at once: the launch forks, starts the
command in the forked child, which then becomes the supervisor); Ray, when
``bench/launch_ray.py`` is here; and a job in a podman image against ``podman run`` of it by
hand (``bench/launch_container.py``).

    python bench/launch.py            # 50 launches, 5 tracked, 20 spare, 10 cold, 10 on Ray
    python bench/launch.py --n 200 --tracked 10 --cold 20 --ray 0

``bench/launch_ray.py`` exposes ``measure(n: int) -> list[float] | None``: seconds from
submit to the same job's first instruction on a local Ray head; None when Ray is not here.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import percentile, scratch_home, table, verdict
from launch_probe import _read_stamp, air_once, job_command, raw_once

GOAL = 1.25
SETTLE_S = 0.03  # let the previous job's processes exit before the next measurement
# After the pool is refilled, its supervisor's MLflow thread ends and it goes idle.
REFILL_SETTLE_S = 0.2


def air_spared(client: object, out: Path) -> tuple[float, float, bool]:
    """A tracked launch from a long-lived process that keeps spare runs: (seconds to the
    job's first instruction, seconds until launch() returned, whether its run was a spare:
    made before the launch, not by it)."""
    from air_skills import JobSpec, JobStatus

    spec = JobSpec(command=job_command(out), gpus=1, track=True, name="bench-spared", code="live")
    t0 = time.time()
    info = client.launch(spec)  # type: ignore[attr-defined]
    returned = time.time() - t0
    first = _read_stamp(out) - t0
    (done,) = client.wait([info.job_id], timeout_s=60, any=False)  # type: ignore[attr-defined]
    if done.status != JobStatus.SUCCEEDED or not done.run_id:
        raise RuntimeError(f"bench job {done.job_id} ended {done.status}: {done.message}")
    run = client.tracker.client.get_run(done.run_id)  # type: ignore[attr-defined]
    return first, returned, run.info.start_time / 1000.0 < t0


def wait_spares(home: Path, timeout_s: float = 120.0) -> None:
    """Until a supervisor has filled the pool of spare runs (and is done making them)."""
    from air_skills.runtime.runs.spare_runs import PER_POOL
    from air_skills.runtime.store.store import Store

    store = Store(home)
    deadline = time.monotonic() + timeout_s
    while store.read("SELECT count(*) AS n FROM spare_runs")[0]["n"] < PER_POOL:
        if time.monotonic() > deadline:
            raise RuntimeError("no spare runs were made: the pool was never asked for")
        time.sleep(0.1)


def ray_latencies(n: int) -> list[float] | None:
    """The Ray row from bench/launch_ray.py, when that file is present and Ray runs here."""
    try:
        import launch_ray  # type: ignore[import-not-found]
    except ImportError:
        return None
    measure = getattr(launch_ray, "measure", None)
    if measure is None:
        return None
    try:
        return measure(n)
    except Exception as exc:  # a missing Ray head must not hide the local figures
        print(f"(ray row skipped: {type(exc).__name__}: {exc})")
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="launches (and raw Popens)")
    parser.add_argument("--tracked", type=int, default=5, help="launches with MLflow tracking")
    parser.add_argument(
        "--spares", type=int, default=20, help="tracked launches claiming spare runs (goal 2)"
    )
    parser.add_argument("--cold", type=int, default=10, help="launches with no idle supervisor")
    parser.add_argument("--ray", type=int, default=10, help="Ray launches, if launch_ray exists")
    parser.add_argument("--container", type=int, default=10, help="launches in a podman image")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]

    with scratch_home(gpus=8) as home, tempfile.TemporaryDirectory() as tmp:
        from air_skills import Client

        stamps = Path(tmp)
        client = Client(home)
        for i in range(3):  # warm the page cache, the database and this process's imports
            raw_once(stamps / f"warm-raw-{i}")
            air_once(client, stamps / f"warm-air-{i}", track=False)
            time.sleep(SETTLE_S)

        raw: list[float] = []
        air: list[float] = []
        returned: list[float] = []
        for i in range(args.n):
            # Interleaved, alternating which goes first, so both see the same machine.
            order = ("raw", "air") if i % 2 == 0 else ("air", "raw")
            for which in order:
                if which == "raw":
                    raw.append(raw_once(stamps / f"raw-{i}"))
                else:
                    first, ret = air_once(client, stamps / f"air-{i}", track=False)
                    air.append(first)
                    returned.append(ret)
                time.sleep(SETTLE_S)

        boxed = None  # (air launches in a container, `podman run` by hand): launch_container.py
        if args.container > 0:
            from launch_container import measure

            boxed = measure(client, args.container)

        tracked: list[float] = []
        tracked_raw: list[float] = []
        mlflow_import_s = 0.0
        if args.tracked > 0:
            t0 = time.perf_counter()
            air_once(client, stamps / "warm-tracked", track=True)  # imports MLflow once
            mlflow_import_s = time.perf_counter() - t0
            for i in range(args.tracked):
                tracked_raw.append(raw_once(stamps / f"traw-{i}"))
                tracked.append(air_once(client, stamps / f"tracked-{i}", track=True)[0])
                time.sleep(SETTLE_S)

        spared: list[float] = []  # goal 2: a long-lived launcher that keeps spare runs
        spared_raw: list[float] = []
        settled: list[float] = []  # the same, each launch after the pool is refilled
        settled_raw: list[float] = []
        claimed = 0
        if args.spares > 0:
            client.runtime.keep_spares = True
            air_once(client, stamps / "warm-spares", track=True)  # asks for the pool
            wait_spares(home)
            for i in range(2 * args.spares):
                refill = i >= args.spares
                if refill:  # the last job's supervisor has replaced the spare it used
                    wait_spares(home)
                    time.sleep(REFILL_SETTLE_S)
                air_rows, raw_rows = (settled, settled_raw) if refill else (spared, spared_raw)
                order = ("raw", "air") if i % 2 == 0 else ("air", "raw")
                for which in order:
                    if which == "raw":
                        raw_rows.append(raw_once(stamps / f"sraw-{i}"))
                    else:
                        first, _, was_spare = air_spared(client, stamps / f"spared-{i}")
                        air_rows.append(first)
                        claimed += was_spare
                    time.sleep(SETTLE_S)

    cold: list[float] = []
    cold_raw: list[float] = []
    if args.cold > 0:
        with (
            scratch_home(gpus=8, AIR_SUPERVISOR_LINGER_S="0") as home,
            tempfile.TemporaryDirectory() as tmp,
        ):
            from air_skills import Client

            client = Client(home)
            stamps = Path(tmp)
            for i in range(args.cold):
                cold_raw.append(raw_once(stamps / f"craw-{i}"))
                cold.append(air_once(client, stamps / f"cold-{i}", track=False)[0])
                time.sleep(0.1)  # its supervisor exits: the next launch finds none waiting

    ray = ray_latencies(args.ray) if args.ray > 0 else None

    raw50, raw95 = percentile(raw, 50), percentile(raw, 95)
    ms = 1000.0

    def row(name: str, values: list[float], base: list[float]) -> list[object]:
        """p50 and p95, and their ratios to the raw Popens measured beside these."""
        p50, p95 = percentile(values, 50), percentile(values, 95)
        b50, b95 = percentile(base, 50), percentile(base, 95)
        return [name, len(values), p50 * ms, p95 * ms, p50 / b50, p95 / b95]

    rows = [
        row("raw subprocess.Popen", raw, raw),
        row("air launch (track=False)", air, raw),
    ]
    if tracked:
        rows.append(row("air launch (track=True, run made here)", tracked, tracked_raw))
    if spared:
        rows.append(row("air launch (track=True, spare runs)", spared, spared_raw))
        rows.append(row("  the same, pool refilled before each", settled, settled_raw))
    if cold:
        rows.append(row("air launch, cold (no idle supervisor)", cold, cold_raw))
    if ray:
        rows.append(row("air launch (backend ray)", ray, raw))
    if boxed:  # its own base: the same image run by hand (goal: launch_container.GOAL)
        rows.append(row("air launch --image (vs podman run)", *boxed))
    print(
        f"launch -> first instruction of `python -S -c ...`; {os.cpu_count()} cores, load"
        f" average {load:.1f} when it began (ratios: to the raw Popens measured beside each)\n"
    )
    print(table(["path", "n", "p50 ms", "p95 ms", "p50 ratio", "p95 ratio"], rows))
    print(
        f"\nlaunch() returned after: p50 {percentile(returned, 50) * ms:.1f} ms,"
        f" p95 {percentile(returned, 95) * ms:.1f} ms (the job may start before it returns)"
    )
    if tracked:
        print(
            f"tracking on: first launch {mlflow_import_s:.2f} s (imports MLflow), then"
            f" p50 {percentile(tracked, 50) * ms:.0f} ms vs raw"
            f" {percentile(tracked_raw, 50) * ms:.0f} ms: MLflow run creation is the cost"
        )
    if spared:
        s50 = percentile(spared, 50) / percentile(spared_raw, 50)
        s95 = percentile(spared, 95) / percentile(spared_raw, 95)
        print(
            f"tracked with spare runs (a long-lived launcher: keep_spares): {claimed}/"
            f"{len(spared) + len(settled)} claimed one; back to back p50 {s50:.2f}x,"
            f" p95 {s95:.2f}x raw; goal <= 1.5x: p50 {verdict(s50, 1.5, False)},"
            f" p95 {verdict(s95, 1.5, False)} (pool refilled first:"
            f" p50 {percentile(settled, 50) / percentile(settled_raw, 50):.2f}x,"
            f" p95 {percentile(settled, 95) / percentile(settled_raw, 95):.2f}x)"
        )
    if ray:
        air50 = percentile(air, 50)
        print(f"ray: p50 {percentile(ray, 50) / air50:.1f}x our local backend")
    r50, r95 = percentile(air, 50) / raw50, percentile(air, 95) / raw95
    print(
        f"\nratio to raw Popen (track=False): p50 {r50:.2f}x, p95 {r95:.2f}x;"
        f" goal <= {GOAL:.2f}x: p50 {verdict(r50, GOAL, False)}, p95 {verdict(r95, GOAL, False)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
