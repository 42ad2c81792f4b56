"""CLI launch latency: a fresh `air launch --json -- true` process, tracking on (the default).

What a user or an agent in a shell waits for, measured side by side in one run with the floor
of starting our CLI at all (`air ls --json` on the same home), and given as ratios to it:

- warm home: spare MLflow runs are there (a supervisor made them); the launch claims one in
  its queue transaction and never imports MLflow; code snapshot on (the default) and, for its
  share, `--code live`;
- first launch on a fresh AIR_HOME: no MLflow store and no spare yet; the launch queues the
  job and returns, and the job's supervisor builds the store and makes the run before the
  command starts (the job still knows its run id from its first instruction).

Goals (issue 17): warm p50 at most 1.3x the floor; fresh-home first launch at most 3x.

    python bench/cli_launch.py            # 20 warm launches of each kind, 5 fresh homes
    python bench/cli_launch.py --n 40 --fresh 10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import percentile, scratch_home, table, verdict

GOAL_WARM = 1.3
GOAL_FRESH = 3.0
AIR = str(Path(sys.executable).with_name("air"))


def timed(argv: list[str], cwd: Path) -> tuple[float, dict | list]:
    """Wall seconds of one fresh `air` process, and its JSON output."""
    t0 = time.perf_counter()
    out = subprocess.run([AIR, *argv], cwd=cwd, capture_output=True, text=True, env=os.environ)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"air {' '.join(argv)} failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    return wall, json.loads(out.stdout)


def wait_ended(home: Path, job_id: str) -> None:
    """Until the job ended (its supervisor's MLflow work must not load the next measurement)."""
    from air_skills import Client

    (info,) = Client(home).wait([job_id], timeout_s=300)
    if info.status.value != "SUCCEEDED":
        raise RuntimeError(f"bench job {job_id} ended {info.status}: {info.message}")


def wait_spares(home: Path, need: int = 2, timeout_s: float = 120.0) -> int:
    from air_skills.runtime.store.store import Store

    store = Store(home)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        n = store.read("SELECT count(*) AS n FROM spare_runs")[0]["n"]
        if n >= need:
            return int(n)
        time.sleep(0.2)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="warm launches of each kind")
    parser.add_argument("--fresh", type=int, default=5, help="first launches on fresh homes")
    parser.add_argument("--settle-s", type=float, default=1.0, help="pause between launches")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="air-cli-bench-"))
    (work / "train.py").write_text("print('hello')\n")  # the code a snapshot captures

    ls: list[float] = []
    snap: list[float] = []
    live: list[float] = []
    claimed = 0
    with scratch_home(gpus=8, AIR_SUPERVISOR_LINGER_S="60") as home:
        for _ in range(2):  # the store, the first runs, and a pool of spares to claim
            _, info = timed(["launch", "--json", "--", "true"], work)
            wait_ended(home, info["job_id"])  # type: ignore[index]
        wait_spares(home)
        timed(["ls", "--json"], work)
        for i in range(args.n):
            order = ["ls", "snap", "live"]
            order = order[i % 3 :] + order[: i % 3]  # rotated: each sees the same machine
            for which in order:
                if which == "ls":
                    ls.append(timed(["ls", "--json"], work)[0])
                    continue
                extra = ["--code", "live"] if which == "live" else []
                wall, info = timed(["launch", "--json", *extra, "--", "true"], work)
                (snap if which == "snap" else live).append(wall)
                claimed += bool(info["run_id"])  # type: ignore[index]
                time.sleep(args.settle_s)  # its supervisor tops the spares up meanwhile

    fresh: list[float] = []
    fresh_ls: list[float] = []
    for _ in range(args.fresh):
        with scratch_home(gpus=8, AIR_SUPERVISOR_LINGER_S="1") as home:
            wall, info = timed(["launch", "--json", "--", "true"], work)
            fresh.append(wall)
            fresh_ls.append(timed(["ls", "--json"], work)[0])
            wait_ended(home, info["job_id"])  # type: ignore[index]

    ms = 1000.0
    floor50, floor95 = percentile(ls, 50), percentile(ls, 95)

    def row(name: str, values: list[float]) -> list[object]:
        p50, p95 = percentile(values, 50), percentile(values, 95)
        return [name, len(values), p50 * ms, p95 * ms, p50 / floor50, p95 / floor95]

    rows = [row("air ls --json (the floor)", ls), row("air launch (snapshot, default)", snap)]
    rows += [row("air launch --code live", live)]
    if fresh:
        rows += [row("first launch, fresh AIR_HOME", fresh), row("air ls, fresh home", fresh_ls)]
    print(
        f"fresh `air` processes, tracking on; {os.cpu_count()} cores, load average {load:.1f}"
        " when it began (ratios: to `air ls --json` on the warm home)\n"
    )
    print(table(["path", "n", "p50 ms", "p95 ms", "p50 ratio", "p95 ratio"], rows))
    total = len(snap) + len(live)
    print(f"\nwarm launches that claimed a spare run: {claimed}/{total}")
    share = percentile(snap, 50) - percentile(live, 50)
    print(f"code snapshot (unchanged tree): {share * ms:+.0f} ms of the p50 launch")
    w50 = percentile(snap, 50) / floor50
    print(
        f"warm launch p50 {w50:.2f}x the floor; goal <= {GOAL_WARM}:"
        f" {verdict(w50, GOAL_WARM, False)}"
    )
    if fresh:
        f50 = percentile(fresh, 50) / floor50
        print(
            f"fresh-home first launch p50 {f50:.2f}x the floor; goal <= {GOAL_FRESH}:"
            f" {verdict(f50, GOAL_FRESH, False)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
