"""Scale: the leaderboard over many finished jobs, air's memory per running job, a short soak.

Rows (issue 41), each printed with its goal:

- leaderboard: top-10 by best at 100 / 10,000 / 50,000 finished jobs whose best is the oldest,
  in-process (``Client.list(metric, order_by="best")``) and as a fresh `air ls --json --metric M
  --best` process beside a plain `air ls --json` on the same home. The jobs are recorded as a
  launch records them and indexed through the write a job's end uses
  (``results_index.write``); ``--real N`` adds N jobs that ran for real (tracked, logging a
  metric) and says so. Goals at 50,000: complete (the oldest is first), at most 100 ms
  in-process and at most 1.5x the time at 100 jobs, the CLI at most 1.5x plain `air ls --json`.
- memory: PSS (/proc/PID/smaps_rollup) of air's processes per running job, 1 and ``--jobs``
  jobs of `sleep`; goal at most 40 MB per job.
- soak (``--soak-min``, default 0: skipped): bench/soak.py's soak for that many minutes
  (identities, studies, 16 simulated GPUs; every job settled once, the index equal to MLflow,
  every journal checks). The issue's soak (30 minutes and 10,000 jobs): `bench/soak.py`.

    python bench/scale.py                       # 100 / 10,000 / 50,000 jobs, 8 running jobs
    python bench/scale.py --sizes 100,2000 --real 20 --soak-min 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import scratch_home, table

AIR = str(Path(sys.executable).with_name("air"))
GOAL_MS = 100.0
GOAL_GROWTH = 1.5
GOAL_CLI = 1.5
GOAL_PSS_MB = 40.0


# --- leaderboard ------------------------------------------------------------------------------


def fill(home: Path, n: int, start: int = 0) -> None:
    """``n`` more finished jobs whose ``loss`` ends near 1 + i/n; the very first job ever
    filled (i == 0) has the best, 0.001. Recorded and indexed as a job's end writes them."""
    from air_skills.models import JobSpec
    from air_skills.runtime.store import results_index
    from air_skills.runtime.store.results_index import summarize
    from air_skills.runtime.store.store import Store, new_job_id
    from air_skills.status import JobStatus

    store = Store(home)
    data = JobSpec(command=["true"], experiment="scale").model_dump(mode="json")
    try:
        for i in range(start, start + n):
            job_id = new_job_id()
            jdir = home / "jobs" / job_id
            jdir.mkdir(parents=True)
            spec = {**data, "config": {"seed": i % 5, "lr": 10 ** -(1 + i % 4)}}
            with store.tx() as c:
                store.queue(
                    spec, job_id, str(jdir / "output.log"), f"j{i}", run_id=os.urandom(16).hex(),
                    project="default", jdir=jdir, c=c,
                )  # fmt: skip
                store.mark_running(c, job_id, [], 1, False)
                store.finish(job_id, JobStatus.SUCCEEDED, message="SUCCEEDED", exit_code=0, c=c)
                v = 0.001 if i == 0 else 1.0 + i / 100_000
                points = [(s, v + (2 - s) * 0.1, s) for s in range(3)]
                result = summarize("loss", points)
                assert result is not None
                results_index.write(store, job_id, [result], final=True, c=c)
    finally:
        store.close()


def run_real(n: int) -> list[str]:
    """``n`` tracked jobs through the real launch path, each logging ``loss`` by its summary."""
    from air_skills import Client

    client = Client()
    ids = []
    for i in range(n):
        code = f"print('---'); print('loss: {2.0 + i / 1000}')"
        ids.append(
            client.launch(
                {
                    "command": [sys.executable, "-c", code],
                    "gpus": 0,
                    "experiment": "scale",
                    "sandbox": "off",
                }
            ).job_id  # fmt: skip
        )
    client.wait(ids, timeout_s=600, any=False)
    return ids


def time_inprocess(reps: int = 15) -> tuple[float, str]:
    from air_skills import Client

    client = Client()
    times = []
    first = ""
    for _ in range(reps):
        t0 = time.perf_counter()
        page = client.list(metric="loss", order_by="best", limit=10)
        times.append(time.perf_counter() - t0)
        first = page.items[0].name
    return statistics.median(times) * 1000, first


def time_cli(argv: list[str], reps: int = 7) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = subprocess.run([AIR, *argv], capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise RuntimeError(out.stdout[-400:] + out.stderr[-400:])
    return statistics.median(times) * 1000


def leaderboard(sizes: list[int], real: int) -> list[list[object]]:
    rows = []
    with scratch_home(gpus=8):
        home = Path(os.environ["AIR_HOME"])
        from air_skills import Client

        Client()  # the home and its database
        done = 0
        ran = run_real(real) if real else []
        for size in sizes:
            t0 = time.perf_counter()
            fill(home, size - done, start=done)
            done = size
            fill_s = time.perf_counter() - t0
            ms, first = time_inprocess()
            cli_ms = time_cli(["ls", "--json", "--metric", "loss", "--best", "--limit", "10"])
            floor_ms = time_cli(["ls", "--json"])
            rows.append(
                [
                    size + len(ran),
                    len(ran),
                    first == "j0",
                    round(ms, 1),
                    round(cli_ms),
                    round(floor_ms),
                    round(cli_ms / floor_ms, 2),
                    round(fill_s, 1),
                ]  # fmt: skip
            )
    return rows


# --- memory ------------------------------------------------------------------------------------


def pss_kb(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def air_pids(home: Path) -> list[int]:
    """air's processes of this home: its supervisors (running a job or idle, from the store)
    and its tracking writer (tracking/writer.py), if one runs."""
    from air_skills.runtime.store.store import Store
    from air_skills.tracking import writer

    store = Store(home)
    try:
        pids = set(store.supervisor_pids())
    finally:
        store.close()
    pid_file = home / writer.SPOOL / writer.PID
    if pid_file.exists() and writer.writer_alive(home):
        pids.add(int(pid_file.read_text()))
    return sorted(pids)


def memory(counts: list[int], writer_on: bool = True) -> list[list[object]]:
    """PSS and RSS per running job of air's processes: ``counts`` tracked jobs of `sleep`
    on simulated GPUs, MLflow in the home's writer or in each supervisor."""
    from air_skills import Client

    rows = []
    for n in counts:
        with scratch_home(gpus=max(8, n), AIR_TRACKING_WRITER="on" if writer_on else "off"):
            home = Path(os.environ["AIR_HOME"])
            client = Client()
            spec = {"command": ["sleep", "600"], "gpus": 1, "sandbox": "off"}
            ids = [client.launch(spec).job_id for _ in range(n)]
            deadline = time.time() + 120
            while time.time() < deadline:
                infos = [client.get(j) for j in ids]
                if all(i.status.value == "RUNNING" for i in infos):
                    break
                time.sleep(0.5)
            time.sleep(8)  # the supervisors' MLflow work (run names, tags) is done by then
            pids = air_pids(home)
            pss = sum(pss_kb(p) for p in pids) / 1024
            rss = sum(rss_kb(p) for p in pids) / 1024
            where = "writer" if writer_on else "in each"
            rows.append([n, where, len(pids), round(pss / n, 1), round(rss / n, 1)])
            client.cancel_all("bench done")
    return rows


# --- soak --------------------------------------------------------------------------------------


def soak(minutes: float) -> dict[str, object]:
    """bench/soak.py's soak for ``minutes`` (however many jobs that makes)."""
    import soak as soak_bench

    args = soak_bench.parser().parse_args(["--minutes", str(minutes), "--jobs", "0"])
    return soak_bench.soak(args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="100,10000,50000")
    ap.add_argument("--real", type=int, default=0, help="jobs that run for real first")
    ap.add_argument("--jobs", type=int, default=8, help="running jobs for the memory row")
    ap.add_argument("--soak-min", type=float, default=0.0)
    ap.add_argument("--skip", default="", help="comma-separated: leaderboard,memory")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    print(f"load average: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})")
    if "leaderboard" not in skip:
        rows = leaderboard([int(s) for s in args.sizes.split(",")], args.real)
        print(table(
            ["jobs", "ran for real", "oldest best found", "in-process ms", "cli ms",
             "ls --json ms", "cli / ls", "fill s"], rows))  # fmt: skip
        base, last = rows[0][3], rows[-1][3]
        print(
            f"goal at the largest: complete, <= {GOAL_MS:.0f} ms in-process (got {last}),"
            f" <= {GOAL_GROWTH}x the smallest (got {float(last) / float(base):.2f}x),"  # type: ignore[arg-type]
            f" cli <= {GOAL_CLI}x ls --json (got {rows[-1][6]}x)"
        )
    if "memory" not in skip:
        rows = memory([1, args.jobs]) + memory([1, args.jobs], writer_on=False)
        print(table(["running jobs", "MLflow", "air processes", "PSS MB / job", "RSS MB / job"],
                    rows))  # fmt: skip
        print(f"goal: <= {GOAL_PSS_MB:.0f} MB PSS per running job")
    if args.soak_min > 0:
        print(json.dumps(soak(args.soak_min), indent=1))


if __name__ == "__main__":
    main()
