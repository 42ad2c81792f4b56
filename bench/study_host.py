"""Many studies on one host: memory (PSS) and CPU of idle study loops, hosted or one process each.

Each study has one trial that waits (`python -S -c "time.sleep(600)"` on a simulated GPU; one
GPU, so one trial runs and the others queue): its loop has nothing to do but wait. Rows:

- ``autoresearch host run`` with 1 and ``--studies`` (default 100) such studies: the host's
  PSS (/proc/PID/smaps_rollup, shared pages counted once), its PSS per study, and its CPU over
  ``--cpu-s`` seconds (utime + stime from /proc/PID/stat) as a share of one core;
- ``autoresearch run`` in a process of its own per study, 1 and ``--processes`` (default 10)
  of them: the same figures summed over those processes (100 processes would cost ~that x10).

Goals (issue 41.3): an idle study loop at most 60 MB PSS and under 1% of a core; 100 studies in
one host far less than 100 processes.

``--agent N``: the agent's path instead: N studies started one by one through
``autoresearch.api.start_study`` (what the MCP tool calls), once while ``autoresearch host run``
runs (each lands in the host) and once with ``AIR_STUDY_HOST=off`` (a process each): the
seconds per call, the processes that appeared, and their PSS once every study launched.

    python bench/study_host.py                      # 1 / 100 hosted, 1 / 10 processes
    python bench/study_host.py --studies 20 --processes 4 --cpu-s 10
    python bench/study_host.py --agent 20
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _common import scratch_home, table

GOAL_PSS_MB = 60.0
GOAL_CPU_PCT = 1.0
WAIT = "import time; time.sleep(600)"


def write_specs(folder: Path, n: int, workdir: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        spec = {
            "name": f"idle{i:03d}",
            "command": [sys.executable, "-S", "-c", WAIT],
            "workdir": str(workdir),
            "base_config": {"x": 0.0},
            "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
            "objective": {"metric": "loss", "direction": "minimize"},
            "budget": {"trials": 1, "concurrency": 1},
            "gpus_per_trial": 1,
            "proposer": "random",
            "sandbox": "off",
        }
        path = folder / f"idle{i:03d}.yaml"
        path.write_text(yaml.safe_dump(spec))
        paths.append(path)
    return paths


def pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def journaled(home: Path, names: list[str], event: str) -> int:
    """How many of the studies' journals hold ``event``."""
    n = 0
    for name in names:
        journal = home / "studies" / name / "journal.jsonl"
        if journal.exists() and f'"event":"{event}"' in journal.read_text():
            n += 1
    return n


def measure(pids: list[int], cpu_s: float) -> tuple[float, float]:
    """(PSS MB summed, CPU % of one core summed over ``cpu_s``)."""
    pss = sum(pss_kb(p) for p in pids) / 1024
    hz = os.sysconf("SC_CLK_TCK")
    before = sum(cpu_ticks(p) for p in pids)
    time.sleep(cpu_s)
    used = (sum(cpu_ticks(p) for p in pids) - before) / hz
    return pss, 100.0 * used / cpu_s


def settle(home: Path, names: list[str], procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every study has launched its trial and made its MLflow parent run (the parents
    are made beside the first trials, through the home's tracking writer)."""
    deadline = time.time() + 600
    for event in ("launched", "mlflow_parent"):
        while (got := journaled(home, names, event)) < len(names):
            if time.time() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"only {got} of {len(names)} studies journaled {event}")
            time.sleep(1)
    time.sleep(5)


def hosted(n: int, cpu_s: float) -> list[object]:
    with scratch_home(gpus=1) as home:
        workdir = home.parent / "wd"
        workdir.mkdir()
        exe = str(Path(sys.executable).with_name("autoresearch"))
        specs = write_specs(home.parent / "src", n, workdir)
        subprocess.run([exe, "host", "add", *map(str, specs)], check=True, capture_output=True)
        t0 = time.time()
        proc = subprocess.Popen([exe, "host", "run"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            settle(home, [p.stem for p in specs], [proc])
            start_s = time.time() - t0
            pss, cpu = measure([proc.pid], cpu_s)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            subprocess.run([str(Path(sys.executable).with_name("air")), "cancel", "--all"],
                           capture_output=True)  # fmt: skip
        return [f"host, {n} studies", 1, round(pss, 1), round(pss / n, 2), round(cpu, 2),
                round(cpu / n, 3), round(start_s)]  # fmt: skip


def separate(n: int, cpu_s: float) -> list[object]:
    with scratch_home(gpus=1) as home:
        workdir = home.parent / "wd"
        workdir.mkdir()
        exe = str(Path(sys.executable).with_name("autoresearch"))
        specs = write_specs(home.parent / "src", n, workdir)
        t0 = time.time()
        procs = [
            subprocess.Popen(
                [exe, "run", str(s)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )  # fmt: skip
            for s in specs
        ]
        try:
            settle(home, [p.stem for p in specs], procs)
            start_s = time.time() - t0
            pss, cpu = measure([p.pid for p in procs], cpu_s)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=60)
            subprocess.run([str(Path(sys.executable).with_name("air")), "cancel", "--all"],
                           capture_output=True)  # fmt: skip
        return [f"{n} x autoresearch run", n, round(pss, 1), round(pss / n, 2), round(cpu, 2),
                round(cpu / n, 3), round(start_s)]  # fmt: skip


def agent(n: int, cpu_s: float, host: bool) -> list[object]:
    """N studies through start_study, with a host running (``host``) or AIR_STUDY_HOST=off."""
    with scratch_home(gpus=1, AIR_STUDY_HOST="auto" if host else "off") as home:
        from autoresearch.api import start_study
        from autoresearch.study.host_folder import host_alive, host_dir

        workdir = home.parent / "wd"
        workdir.mkdir()
        exe = str(Path(sys.executable).with_name("autoresearch"))
        specs = write_specs(home.parent / "src", n, workdir)
        procs: list[subprocess.Popen[bytes]] = []
        if host:
            procs.append(subprocess.Popen([exe, "host", "run"], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))  # fmt: skip
            while not host_alive(host_dir()):
                time.sleep(0.1)
        pids: set[int] = set()
        try:
            t0 = time.time()
            for spec in specs:
                reply = start_study(str(spec))
                pids.add(int(reply["pid"]))
                assert bool(reply.get("hosted_by")) == host, reply
            per_call = (time.time() - t0) / n
            settle(home, [p.stem for p in specs], procs)
            pss, cpu = measure(sorted(pids), cpu_s)
        finally:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            for pid in pids:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            subprocess.run([str(Path(sys.executable).with_name("air")), "cancel", "--all"],
                           capture_output=True)  # fmt: skip
        how = "host running" if host else "AIR_STUDY_HOST=off"
        return [f"{n} x start_study, {how}", len(pids), round(pss, 1), round(pss / n, 2),
                round(cpu, 2), round(per_call, 2)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--studies", type=int, default=100)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--cpu-s", type=float, default=30.0)
    ap.add_argument("--agent", type=int, default=0, help="N studies through start_study")
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})")
    if args.agent:
        rows = [agent(args.agent, args.cpu_s, True), agent(args.agent, args.cpu_s, False)]
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        print(table(["studies", "processes", "PSS MB", "PSS MB / study", "CPU % core",
                     "s per start_study"], rows))  # fmt: skip
        return
    rows = [hosted(1, args.cpu_s), hosted(args.studies, args.cpu_s)]
    rows += [separate(1, args.cpu_s), separate(args.processes, args.cpu_s)]
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(table(["idle studies", "processes", "PSS MB", "PSS MB / study", "CPU % core",
                 "CPU % / study", "to all launched s"], rows))  # fmt: skip
    host_n, one_proc = rows[1], rows[2]
    per_host = float(host_n[3])  # type: ignore[arg-type]
    per_proc = float(one_proc[3])  # type: ignore[arg-type]
    print(
        f"{args.studies} hosted studies: {host_n[2]} MB PSS in all, {per_host} MB each"
        f" (goal <= {GOAL_PSS_MB:.0f}); one process per study: {per_proc} MB each, so"
        f" {args.studies} of them ~{per_proc * args.studies:.0f} MB"
        f" ({per_proc * args.studies / float(host_n[2]):.1f}x the host);"  # type: ignore[arg-type]
        f" idle host CPU {host_n[4]}% of a core (goal < {GOAL_CPU_PCT:g}%)"
    )


if __name__ == "__main__":
    main()
