"""Submit -> first instruction on Slurm: air's launch vs a raw `sbatch` of the same command,
side by side on a throwaway single-node cluster (goal: the warm row's p50 at most 1.2x raw).

All rows run the same job: a bare interpreter whose first statement writes ``time.time()`` to
a file. Four rows, interleaved:

- raw sbatch: ``sbatch`` of a two-line script (the floor: Slurm's own scheduling);
- warm API: ``Client.launch`` in this process (imports and home warm; code: live, no MLflow
  run): the backend's own cost (the folder, the launch file, the runner on the node);
- cold CLI: a fresh ``air launch --backend slurm --code live`` process, the path a user takes
  (interpreter start, imports and the job's MLflow run included: the CLI tracks every job; it
  claims a spare run, completed after sbatch by the home's tracking writer, or has the writer
  make one: slurm/backend.py; since 41.5 the plain form takes the fast path too, printing the
  typer command's line: cli/fast/launch.py). Goal (issue 41.5): p50 at most 1.5x raw;
- cold CLI --json: the same as an agent runs it (`air launch --json`: the fast path, no typer,
  rich or pydantic: cli/fast/launch.py).

Run as root where `make install` added Slurm.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import percentile, scratch_home, table, verdict
from launch_probe import _read_stamp, job_command

GOAL = 1.2
GOAL_CLI = 1.5


def raw_once(tmp: Path, i: int) -> float:
    import shlex
    import time

    out = tmp / f"raw-{i}"
    script = tmp / f"raw-{i}.sh"
    script.write_text("#!/bin/sh\nexec " + shlex.join(job_command(out)) + "\n")
    t0 = time.time()
    subprocess.run(
        ["sbatch", "--parsable", "--export=NONE", f"--output={tmp / 'raw.out'}", str(script)],
        check=True,
        capture_output=True,
    )
    return _read_stamp(out, 120) - t0


def air_once(client: object, tmp: Path, i: int, returned: list[float] | None = None) -> float:
    import time

    from air_skills import JobSpec

    out = tmp / f"air-{i}"
    spec = JobSpec(command=job_command(out), backend="slurm", code="live", track=False)
    t0 = time.time()
    client.launch(spec)  # type: ignore[attr-defined]
    if returned is not None:
        returned.append(time.time() - t0)
    return _read_stamp(out, 120) - t0


def cli_once(
    env: dict[str, str], tmp: Path, i: int, returned: list[float], json_: bool = False
) -> float:
    """A fresh `air launch` process, as a user runs it (timed from before its start); with
    ``json_``, `air launch --json` as an agent runs it (the fast path: cli/fast/launch.py)."""
    import time

    out = tmp / f"cli{'-json' if json_ else ''}-{i}"
    air = str(Path(sys.executable).parent / "air")
    argv = [air, "launch", "--backend", "slurm", "--code", "live", *(["--json"] * json_)]
    argv += ["--", *job_command(out)]
    t0 = time.time()
    subprocess.run(argv, check=True, capture_output=True, env=env)
    returned.append(time.time() - t0)
    return _read_stamp(out, 120) - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="submissions of each kind")
    args = parser.parse_args(argv)
    from air_skills.testing.slurm_cluster import LocalSlurmCluster, missing

    why = missing()
    if why:
        print(f"skipped: {why}")
        return 0
    load = os.getloadavg()[0]
    # No sandbox: the job writes its stamp outside its folder, and raw sbatch runs bare too.
    with (
        scratch_home(AIR_SANDBOX="off"),
        tempfile.TemporaryDirectory() as tmp_name,
        LocalSlurmCluster(),
    ):
        from air_skills import Client

        tmp = Path(tmp_name)
        client = Client()
        air_once(client, tmp, -1)  # warm this process's imports and the home
        env = dict(os.environ)
        raw, air, cli, returned, cli_returned = [], [], [], [], []
        fast: list[float] = []
        fast_returned: list[float] = []
        for i in range(args.n):  # interleaved: all rows see the same machine
            raw.append(raw_once(tmp, i))
            air.append(air_once(client, tmp, i, returned))
            cli.append(cli_once(env, tmp, i, cli_returned))
            fast.append(cli_once(env, tmp, i, fast_returned, json_=True))
    p50_raw, p50_air = percentile(raw, 50), percentile(air, 50)
    rows = [
        ["raw sbatch", f"{p50_raw * 1000:.0f}", f"{percentile(raw, 90) * 1000:.0f}", "1.00x"],
        [
            "air launch --backend slurm (warm API)",
            f"{p50_air * 1000:.0f}",
            f"{percentile(air, 90) * 1000:.0f}",
            f"{p50_air / p50_raw:.2f}x",
        ],
        [
            "air launch --backend slurm (cold CLI, plain)",
            f"{percentile(cli, 50) * 1000:.0f}",
            f"{percentile(cli, 90) * 1000:.0f}",
            f"{percentile(cli, 50) / p50_raw:.2f}x",
        ],
        [
            "air launch --backend slurm --json (cold CLI, fast path)",
            f"{percentile(fast, 50) * 1000:.0f}",
            f"{percentile(fast, 90) * 1000:.0f}",
            f"{percentile(fast, 50) / p50_raw:.2f}x",
        ],
    ]
    print(
        f"submit -> first instruction, n={args.n} each, load {load:.1f}, python {sys.version[:4]}"
    )
    print(table(["path", "p50 ms", "p90 ms", "vs raw"], rows))
    print(f"(air's launch() returned after {percentile(returned, 50) * 1000:.0f} ms at p50;")
    print(
        f" the air launch process exited after {percentile(cli_returned, 50) * 1000:.0f} ms,"
        f" with --json {percentile(fast_returned, 50) * 1000:.0f} ms)"
    )
    print(f"load at the end: {os.getloadavg()[0]:.1f}")
    ratio = p50_air / p50_raw
    print(f"goal: warm API p50 at most {GOAL}x raw sbatch: {verdict(ratio, GOAL, False)}")
    cold = percentile(cli, 50) / p50_raw
    print(f"goal: cold CLI p50 at most {GOAL_CLI}x raw sbatch: {verdict(cold, GOAL_CLI, False)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
