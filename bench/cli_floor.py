"""The CLI's own floor: CPU seconds of a fresh `air ls --json` (and `air status --json`, `air
launch --json --dry-run`, `air launch --json`: through the fast path and through the typer app)
next to `python -c pass`, side by side in one run.

CPU time (user + system of the child, from its rusage), not wall time: on a loaded machine
wall time measures the neighbours; CPU time is what each call costs. Interleaved runs, the
median of each. Goal (issue 23): `air ls --json` at most 5x `python -c pass`.

    python bench/cli_floor.py            # 15 runs of each
    python bench/cli_floor.py --n 30
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from _common import scratch_home

GOAL = 5.0
BIN = Path(sys.executable).parent


def cpu_s(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system CPU seconds of one child process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed: {done.stderr[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15)
    args = parser.parse_args()
    with scratch_home() as home:
        env = {**os.environ, "AIR_HOME": str(home)}
        cwd = home.parent  # a small folder: the launch's snapshot is not what is measured
        job = subprocess.run(
            [str(BIN / "air"), "launch", "--json", "--", "true"],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            check=True,
        ).stdout
        job_id = job.split('"job_id": "')[1].split('"')[0]
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "air ls --json": [str(BIN / "air"), "ls", "--json"],
            "air status --json": [str(BIN / "air"), "status", job_id, "--json"],
            "air launch --json --dry-run": [
                str(BIN / "air"),
                "launch",
                "--json",
                "--dry-run",
                "--",
                "true",
            ],
            # a real launch each time (a job that runs `true`)
            "air launch --json": [
                str(BIN / "air"),
                "launch",
                "--json",
                "--allow-duplicate",
                "--",
                "true",
            ],
            # the same launch through the typer app (the path before cli/fast/launch.py)
            "air launch --json (typer)": [
                sys.executable,
                "-c",
                "from air_skills.cli.app import main; main()",
                "launch",
                "--json",
                "--allow-duplicate",
                "--",
                "true",
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.n):
            for name, argv in cases.items():
                times[name].append(cpu_s(argv, env, cwd))
    floor = statistics.median(times["python -c pass"])
    print(f"{'command':<30} {'CPU s (median)':>15} {'x python -c pass':>17}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<30} {med:>15.3f} {med / floor:>16.1f}x")
    ratio = statistics.median(times["air ls --json"]) / floor
    verdict = "met" if ratio <= GOAL else "NOT met"
    print(f"goal: air ls --json at most {GOAL:.0f}x python -c pass: {ratio:.1f}x ({verdict})")


if __name__ == "__main__":
    main()
