"""The sandbox's cost (issue 25): launch -> first instruction, and log -> metric visible.

Rows, interleaved in one run on one scratch AIR_HOME:
- launch: ``Client.launch`` called -> the job's first instruction (a ``python -S`` job that
  writes ``time.time()`` into its own checkpoint folder), sandbox off vs on (bwrap).
  Goal: sandboxed p50 at most 1.10x unsandboxed. Two rows of each: launched 0.3 s after the
  last job ended (an agent's or a study's next launch: the idle supervisor has made the next
  sandbox ahead, sandbox_ahead.py), and back to back (the next launch the instant the last
  job ended: no time to make it ahead, bwrap starts on the launch's path).
- metric: a running job logs one metric (MlflowClient.log_metric) and stamps the time it
  returned; the bench polls ``Client.metrics`` until the value is there. Unsandboxed the job
  writes the shared sqlite store itself; sandboxed it writes its own store and its supervisor
  forwards the line (runtime/execution/metric_relay.py). Goal: visible within 2 s. A third
  row runs an untracked job first, so that an idle supervisor without MLflow is the most
  recently idle when the tracked job is launched (supervision/idle.py: a tracked job goes to
  one with MLflow loaded).

- cold launch: a fresh ``air launch SPEC.yaml`` process on a fresh AIR_HOME (no supervisor
  waiting, nothing imported) -> the job's first instruction, sandbox off vs on; and on for a
  user whose cache has not yet seen bwrap work (a fresh XDG_CACHE_HOME: the probe runs bwrap).
  The rows above are warm: one long-lived ``Client`` with an idle supervisor waiting.

    python bench/sandbox.py            # 20 launches each, 8 cold ones, 5 metric probes each
    python bench/sandbox.py --n 50 --cold 15 --metric 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import percentile, scratch_home, table, verdict

FIRST = "import os,time;open(os.environ['AIR_CHECKPOINT_DIR']+'/t','w').write(repr(time.time()))"
# Between one launch's job ending and the next launch, for the first launch rows: longer
# than an idle supervisor waits before it makes the next sandbox (idle.AHEAD_AFTER_S).
PAUSE_S = 0.3
METRIC = """
import os, time
from mlflow.tracking import MlflowClient
c = MlflowClient()
c.log_metric(os.environ["MLFLOW_RUN_ID"], "probe", 1.0, step=0)
t = time.time()
open(os.environ["AIR_CHECKPOINT_DIR"] + "/t", "w").write(repr(t))
stop = os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "stop")
while not os.path.exists(stop):
    time.sleep(0.05)
"""


def _stamp(path: Path, deadline_s: float = 180.0) -> float:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            text = path.read_text()
            if text:
                return float(text)
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"the job never wrote {path}")


def launch_once(client: object, home: Path, mode: str) -> float:
    from air_skills import JobSpec

    spec = JobSpec(
        command=[sys.executable, "-S", "-c", FIRST],
        track=False,
        code="live",
        sandbox=mode,  # type: ignore[arg-type]
        name=f"bench-{mode}",
    )
    t0 = time.time()
    info = client.launch(spec)  # type: ignore[attr-defined]
    first = _stamp(home / "jobs" / info.job_id / "checkpoints" / "t") - t0
    client.wait([info.job_id], timeout_s=60)  # type: ignore[attr-defined]
    return first


def cold_once(mode: str, fresh_cache: bool) -> float:
    """A fresh `air launch` process on a fresh AIR_HOME: launch -> the job's first instruction."""
    root = Path(tempfile.mkdtemp(prefix="air-bench-cold-"))
    home = root / "air_home"
    spec = root / "job.yaml"
    command = json.dumps([sys.executable, "-S", "-c", FIRST])
    spec.write_text(f"command: {command}\ntrack: false\ncode: live\nsandbox: '{mode}'\n")
    env = {**os.environ, "AIR_HOME": str(home), "AIR_SUPERVISOR_LINGER_S": "0.5"}
    if fresh_cache:
        env["XDG_CACHE_HOME"] = str(root / "cache")
    air = str(Path(sys.executable).parent / "air")
    try:
        t0 = time.time()
        done = subprocess.run([air, "launch", str(spec), "--json"], env=env, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"air launch failed: {done.stdout!r} {done.stderr!r}")
        job_id = json.loads(done.stdout)["job_id"]
        return _stamp(home / "jobs" / job_id / "checkpoints" / "t") - t0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _idle_untracked(client: object, home: Path) -> None:
    """Run an untracked job and wait until its supervisor is idle: one without MLflow waits
    now, the most recently idle (the next tracked job's run and relay would import MLflow)."""
    from air_skills import JobSpec

    spec = JobSpec(command=[sys.executable, "-S", "-c", "pass"], track=False, code="live")
    info = client.launch(spec)  # type: ignore[attr-defined]
    client.wait([info.job_id], timeout_s=60)  # type: ignore[attr-defined]
    sup = client.store.row(info.job_id).supervisor_pid  # type: ignore[attr-defined]
    end = time.monotonic() + 60
    read = client.store.read  # type: ignore[attr-defined]
    while time.monotonic() < end and not read("SELECT 1 FROM idle_supervisors WHERE pid=?", (sup,)):
        time.sleep(0.01)


def metric_once(client: object, home: Path, mode: str, after_untracked: bool = False) -> float:
    from air_skills import JobSpec
    from air_skills.errors import AirError

    if after_untracked:
        _idle_untracked(client, home)
    spec = JobSpec(
        command=[sys.executable, "-c", METRIC], code="live", sandbox=mode, name=f"m-{mode}"
    )  # type: ignore[arg-type]
    info = client.launch(spec)  # type: ignore[attr-defined]
    ckpt = home / "jobs" / info.job_id / "checkpoints"
    logged = _stamp(ckpt / "t")
    while True:
        try:
            if "probe" in client.metrics(info.job_id).latest:  # type: ignore[attr-defined]
                seen = time.time()
                break
        except AirError:
            pass
        if time.time() - logged > 30:
            raise RuntimeError(f"{mode}: the metric never became visible")
        time.sleep(0.02)
    (ckpt / "stop").write_text("")
    client.wait([info.job_id], timeout_s=60)  # type: ignore[attr-defined]
    return seen - logged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="launches per mode")
    parser.add_argument("--metric", type=int, default=5, help="metric probes per mode")
    parser.add_argument("--cold", type=int, default=8, help="cold launches per mode")
    args = parser.parse_args()
    from air_skills import Client
    from air_skills.runtime.execution import sandbox

    why = sandbox.unavailable()
    if why is not None:
        print(f"no sandbox here ({why}): nothing to compare")
        return
    with scratch_home(gpus=4) as home:
        client = Client(home)
        launch: dict[tuple[str, float], list[float]] = {}
        launch_once(client, home, "off")  # warm: a supervisor is waiting from now on
        for gap in (PAUSE_S, 0.0):
            for _ in range(args.n):
                for mode in ("off", "on"):
                    time.sleep(gap)
                    launch.setdefault((mode, gap), []).append(launch_once(client, home, mode))
        cold: dict[str, list[float]] = {"off": [], "on": [], "on, bwrap not yet probed": []}
        for _ in range(args.cold):
            for row in cold:
                cold[row].append(cold_once(row.split(",")[0], fresh_cache="probed" in row))
        metric: dict[str, list[float]] = {"off": [], "on": [], "on, after an untracked job": []}
        for _ in range(args.metric):
            for row in metric:
                after = "untracked" in row
                metric[row].append(metric_once(client, home, row.split(",")[0], after))
    rows = []
    for gap in (PAUSE_S, 0.0):
        off = launch[("off", gap)]
        base50, base95 = percentile(off, 50), percentile(off, 95)
        when = f"{gap:.1f} s after the last job" if gap else "back to back"
        for mode in ("off", "on"):
            p50, p95 = percentile(launch[(mode, gap)], 50), percentile(launch[(mode, gap)], 95)
            rows.append(
                [
                    f"warm launch (Client, idle supervisor), {when}, sandbox {mode}",
                    f"{p50 * 1000:.1f} ms",
                    f"{p95 * 1000:.1f} ms",
                    f"{p50 / base50:.2f}x / {p95 / base95:.2f}x",
                ]  # fmt: skip
            )
    cold50, cold95 = percentile(cold["off"], 50), percentile(cold["off"], 95)
    for row, values in cold.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        rows.append(
            [
                f"cold launch (fresh air launch, fresh AIR_HOME), sandbox {row}",
                f"{p50 * 1000:.1f} ms",
                f"{p95 * 1000:.1f} ms",
                f"{p50 / cold50:.2f}x / {p95 / cold95:.2f}x",
            ]  # fmt: skip
        )
    for row, values in metric.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        how = "direct to sqlite" if row == "off" else "relayed by the supervisor"
        rows.append([f"metric visible, sandbox {row} ({how})", f"{p50:.2f} s", f"{p95:.2f} s", ""])
    print(table(["row", "p50", "p95", "vs sandbox off (p50 / p95)"], rows))
    for gap in (PAUSE_S, 0.0):
        ratio = percentile(launch[("on", gap)], 50) / percentile(launch[("off", gap)], 50)
        when = f"{gap:.1f} s after the last job" if gap else "back to back"
        print(f"launch goal (sandboxed p50 <= 1.10x), {when}: {ratio:.2f}x", end=" ")
        print(verdict(ratio, 1.10, False))
    ratio = percentile(cold["on"], 50) / cold50
    print(f"cold launch, sandboxed p50: {ratio:.2f}x {verdict(ratio, 1.10, False)}")
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    worst = max(metric["on"] + metric["on, after an untracked job"])
    print(f"metric goal (visible within 2 s): worst {worst:.2f} s {verdict(worst, 2.0, False)}")


if __name__ == "__main__":
    main()
