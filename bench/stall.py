"""Stall detection: how soon a hung job is found past its timeout, and what the watch costs.

1. Detection delay: jobs print their clock once and then go silent under a 60 s stall timeout
   (long enough that the watch reads its signals every 3 s, as under the default); the delay
   is the time the job is recorded FAILED (stacks taken, SIGTERM, outcome written) minus
   (that print + the timeout). Goal: at most 5 s.
2. Watchdog cost: N idle-but-healthy jobs (a line every 12 s: the watch's deep read of metrics
   and GPUs runs between lines) with detection on (30 min) and off (0), alternated; the CPU
   time of their supervisors over the same window, read from /proc. Goal: at most 1.05x.
3. The watch's own share, measured alone (steadier than 2 on a loaded machine): the CPU of
   one due check (a stat of the log, the phase folders' two when quiet; a line every 4th
   check, as the healthy jobs print) every CHECK_MAX_S, over the supervisors' CPU per second
   with detection off (from 2): 1 + that share is the cost the watch adds.

``.venv/bin/python bench/stall.py [--jobs 50] [--window-s 20] [--rounds 2] [--delays 5]``
(50 jobs, the issue's size, by default; ``--quick``: 20 jobs, one round, 2 delays).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import percentile, scratch_home, table, verdict

from air_skills import Client, JobSpec, JobStatus

SILENT = "import time\nprint(time.time(), flush=True)\nwhile True:\n    time.sleep(0.05)\n"
HEALTHY = "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(12)\n"
TICK_S = os.sysconf("SC_CLK_TCK")
WARMUP_S = 5.0


def detection_delays(client: Client, n: int, timeout_s: float = 3.0) -> list[float]:
    """Seconds from (last output + timeout) to the stall event, one per job."""
    spec = JobSpec(
        command=[sys.executable, "-c", SILENT],
        cpus=1,
        track=False,
        stall_timeout_min=timeout_s / 60,
    )
    ids = [client.launch(spec).job_id for _ in range(n)]
    client.wait(ids, timeout_s=timeout_s + 120, any=False)
    delays = []
    for job_id in ids:
        info = client.get(job_id)
        if info.status != JobStatus.FAILED or "reason: stalled" not in info.message:
            print(f"  {job_id}: not stalled? {info.status} {info.message[:100]}")
            continue
        first = open(info.log_path or "").readline().strip()
        [event] = [e for e in client.store.events(job_id) if e["kind"] == "failed"]
        delays.append(event["ts"] - (float(first) + timeout_s))
    return delays


def _cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has run, in nanoseconds from schedstat (utime/stime count 10 ms
    ticks: coarser than a supervisor's whole window), else from stat."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK_S  # utime + stime


def supervisors_cpu(client: Client, jobs: int, window_s: float, stall_min: float) -> float:
    """CPU seconds the supervisors of ``jobs`` healthy jobs use over ``window_s``."""
    spec = JobSpec(
        command=[sys.executable, "-c", HEALTHY], cpus=1, track=False, stall_timeout_min=stall_min
    )
    ids = [client.launch(spec).job_id for _ in range(jobs)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = [client.store.row(j) for j in ids]
        if all(r is not None and r.status == "RUNNING" and r.supervisor_pid for r in rows):
            break
        time.sleep(0.2)
    pids = [r.supervisor_pid for r in (client.store.row(j) for j in ids) if r and r.supervisor_pid]
    # A supervisor started cold boots (imports) after its command has started: let that pass,
    # so the window holds only the ticks of a steady job.
    time.sleep(WARMUP_S)
    before = sum(_cpu_s(p) for p in pids)
    time.sleep(window_s)  # the measured window: supervisors doing their ticks
    used = sum(_cpu_s(p) for p in pids) - before
    client.cancel_all("bench round over")
    return used


def watch_cpu_per_check(checks: int = 20_000) -> float:
    """CPU seconds of one due check of a stall watch over a job that prints every 4th check."""
    from air_skills.runtime.supervision.stall import CHECK_MAX_S, StallWatch

    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "job.log")
        with open(log, "w") as out:
            watch = StallWatch(Path(folder), log, 1800.0, now=0.0)
            start = time.process_time()
            for n in range(checks):
                if n % 4 == 0:
                    out.write("tick\n")
                    out.flush()
                watch.check((n + 1) * CHECK_MAX_S, list)
            return (time.process_time() - start) / checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="20 jobs, one round, 2 delays")
    ap.add_argument("--window-s", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--delays", type=int, default=5)
    ap.add_argument("--delay-timeout-s", type=float, default=60.0)
    args = ap.parse_args()
    if args.quick:
        args.jobs, args.rounds, args.delays = 20, 1, 2
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    # One CPU slot per job: every job runs at once (they sleep; the slots are bookkeeping).
    slots = str(max(args.jobs, args.delays, 1))
    with scratch_home(gpus=8, AIR_GRACE_S="1", AIR_CPU_SLOTS=slots) as home:
        client = Client(home)
        delays = detection_delays(client, args.delays, args.delay_timeout_s) if args.delays else []
        on: list[float] = []
        off: list[float] = []
        for n in range(args.rounds):  # alternated (on-off, off-on): load drifts hit both
            for stall_min in (30.0, 0.0) if n % 2 == 0 else (0.0, 30.0):
                used = supervisors_cpu(client, args.jobs, args.window_s, stall_min)
                (on if stall_min else off).append(used)
    rows = []
    if off:
        per_check = watch_cpu_per_check()
        from air_skills.runtime.supervision.stall import CHECK_MAX_S

        per_s = sum(off) / (args.jobs * args.window_s * len(off))  # one supervisor, detection off
        share = per_check / CHECK_MAX_S / per_s
        rows.append(
            [f"the watch alone: {per_check * 1e6:.1f} us a check every {CHECK_MAX_S:g} s, over"
             f" {per_s * 1e3:.2f} ms/s of a supervisor", f"{1 + share:.4f}x", "<= 1.05x",
             verdict(1 + share, 1.05, False)]
        )  # fmt: skip
    if delays:
        worst = max(delays)
        rows.append(
            ["detection delay past the timeout, s (p50 / max)",
             f"{percentile(delays, 50):.2f} / {worst:.2f}", "<= 5 s", verdict(worst, 5, False)]
        )  # fmt: skip
    if on and off:
        ratio = sum(on) / max(sum(off), 1e-9)
        rows.append(
            [f"supervisors' CPU, {args.jobs} healthy jobs x {args.window_s:g} s, on / off",
             f"{sum(on):.2f} / {sum(off):.2f} s = {ratio:.3f}x", "<= 1.05x",
             verdict(ratio, 1.05, False)]
        )  # fmt: skip
    print(table(["measure", "figure", "goal", "verdict"], rows))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
