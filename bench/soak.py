"""The soak (issue 41): many jobs from several identities and studies at once, nothing lost.

**Soak** (default): for at least ``--minutes`` and at least ``--jobs`` jobs (stopping at
``--max-minutes`` whichever is missing), ``--identities`` air-mcp identities (tokens, each
its own project) keep launching tracked jobs through ``Client.launch`` on ``--gpus``
simulated GPUs and the CPU slots (70% 1 GPU, 10% 2 GPUs, 20% CPU), mostly of 0.2-5 s with
2% of 30 s and 1% that fail; ``--studies`` studies (``autoresearch run``, random search, 1
GPU per trial) start one after another across the soak. Jobs are shell commands that print
their metric as a summary block (``---`` then ``loss: V``), the lightest way a job reports a
metric: no MLflow and no Python in the job; the supervisor hands it to the home's tracking
writer. At the end it checks:

- every job settled exactly once (one terminal status, one end event) and none left live;
- the results index equals MLflow's own record (``latest_metrics`` and the run's status) for
  every tracked job, before any catch-up;
- every study's journal checks (no unreadable or skipped line, every trial final, each
  trial's job ended and its value the index's) and its loop exited 0.

**Busy** (``--busy``): ``--busy-studies`` (8) studies at once, each ``--busy-trials`` (3)
trials of ``--trial-s`` (30) seconds in sequence on 8 simulated GPUs: the ideal over the wall
time from the loops' start to the last trial's end (the ideal: the trials' work spread over
the 8 GPUs), the GPU-busy fraction (the trials' GPU-seconds over 8 x that wall; goal >= 0.9;
the issue measured 0.80), the same from the first trial's start, and the peak PSS of air's
own processes (loops, supervisors, the tracking writer; sampled twice a second). The issue's
second row is ``--busy-studies 20 --busy-trials 6 --trial-s 3`` (ideal 45 s; it measured
100 s and a peak of 6.5 GB).

    python bench/soak.py --minutes 3 --jobs 300          # a short check
    python bench/soak.py                                 # 30 minutes, 10,000 jobs, 20 studies
    python bench/soak.py --busy
    python bench/soak.py --busy --busy-studies 20 --busy-trials 6 --trial-s 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import percentile, scratch_home

STUDIES = "WHERE json_extract(spec, '$.experiment') LIKE 'soak-study-%'"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")
END_EVENTS = tuple(s.lower() for s in TERMINAL)
MLFLOW_STATUS = {"SUCCEEDED": "FINISHED", "FAILED": "FAILED", "CANCELLED": "KILLED",
                 "TIMED_OUT": "FAILED"}  # fmt: skip
TRIAL = """import json, os, time
t0 = time.time()
cfg = json.load(open(os.environ["AIR_CONFIG_FILE"]))
time.sleep(cfg["sleep_s"])
print("---")
print("loss:", (cfg["x"] - 0.3) ** 2 + cfg.get("seed", 0) * 1e-3)
print("cmd_start:", t0)
print("cmd_end:", time.time())
"""


def _durations(rng: random.Random) -> float:
    return rng.choices([0.2, 0.5, 1, 2, 5, 30], weights=[30, 25, 20, 15, 8, 2])[0]


def _job(rng: random.Random, n: int, workdir: Path) -> dict[str, Any]:
    secs = _durations(rng)
    gpus = rng.choices([1, 2, 0], weights=[70, 10, 20])[0]
    fail = rng.random() < 0.01
    body = f"sleep {secs}; echo ---; echo loss: {rng.random():.6f}" + ("; exit 3" if fail else "")
    return {
        "command": ["sh", "-c", body], "gpus": gpus, "experiment": f"soak{n % 5}",
        "sandbox": "off", "allow_duplicate": True, "workdir": str(workdir), "name": f"s{n}",
    }  # fmt: skip


def _study(k: int, workdir: Path, trials: int, concurrency: int, sleep: list[float]) -> dict:
    return {
        "name": f"soak-study-{k}",
        "command": [sys.executable, "-S", "trial.py"],
        "workdir": str(workdir),
        "base_config": {"x": 0.0, "sleep_s": sleep[0], "seed": k},
        "search_space": {
            "x": {"type": "float", "low": -1.0, "high": 1.0},
            "sleep_s": {"type": "choice", "values": sleep},
        },
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": trials, "concurrency": concurrency},
        "gpus_per_trial": 1,
        "proposer": {"type": "random", "seed": k},
        "early_stopping": {"type": "none"},
        "config_as": "file",
        "sandbox": "off",
        "experiment": f"soak-study-{k}",
    }


def _start_study(root: Path, study: dict[str, Any]) -> subprocess.Popen[bytes]:
    path = root / f"{study['name']}.json"
    path.write_text(json.dumps(study))
    folder = root / "studies" / study["name"]
    cmd = [sys.executable, "-m", "autoresearch.cli", "run", str(path), "--dir", str(folder)]
    log = (root / f"{study['name']}.log").open("wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _count(db: Path, sql: str, args: tuple[Any, ...] = ()) -> Any:
    conn = sqlite3.connect(db, timeout=60)
    try:
        return conn.execute(sql, args).fetchone()[0]
    finally:
        conn.close()


# --- the checks ----------------------------------------------------------------------------------


def check_settled(db: Path) -> dict[str, int]:
    """Every job has one terminal status and exactly one end event."""
    conn = sqlite3.connect(db, timeout=60)
    try:
        total = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        live = conn.execute(f"SELECT count(*) FROM jobs WHERE status NOT IN {TERMINAL}").fetchone()[
            0
        ]
        ends = dict(
            conn.execute(
                f"SELECT job_id, count(*) FROM events WHERE kind IN {END_EVENTS} GROUP BY job_id"
            ).fetchall()
        )
        statuses = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status"))
        by = dict(conn.execute("SELECT launched_by, count(*) FROM jobs GROUP BY launched_by"))
        spans = conn.execute(
            "SELECT started_at, ended_at, json_array_length(gpus) FROM jobs"
            " WHERE started_at IS NOT NULL AND ended_at IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    edges = sorted([(s, n) for s, _, n in spans] + [(e, -n) for _, e, n in spans])
    used = peak = 0
    for _, n in edges:  # an end before a start at the same instant: sorted by (time, -n)
        used += n
        peak = max(peak, used)
    return {
        "by_launcher": by,
        "peak_gpus_in_use": peak,
        "jobs": total,
        "not_settled": live,
        "settled_once": sum(1 for n in ends.values() if n == 1),
        "settled_twice_or_more": sum(1 for n in ends.values() if n > 1),
        "no_end_event": total - len(ends),
        **{s.lower(): n for s, n in statuses.items()},
    }


def check_index(home: Path) -> dict[str, int]:
    """The index against MLflow's own tables, for every tracked job (no catch-up first)."""
    from air_skills.runtime.store import results_index
    from air_skills.runtime.store.store import Store

    store = Store(home)
    try:
        jobs = store.read("SELECT job_id, run_id, status FROM jobs WHERE run_id IS NOT NULL")
        index = results_index.read(store, [r[0] for r in jobs], "loss")
        due = len(results_index.due(store))
    finally:
        store.close()
    conn = sqlite3.connect(home / "mlflow.db", timeout=60)
    try:
        latest = {
            r: (None if nan else v)
            for r, v, nan in conn.execute(
                "SELECT run_uuid, value, is_nan FROM latest_metrics WHERE key='loss'"
            )
        }
        status = dict(conn.execute("SELECT run_uuid, status FROM runs"))
    finally:
        conn.close()
    out = dict.fromkeys(["value_differs", "in_one_only", "run_missing", "run_status_differs"], 0)
    out.update({"tracked_jobs": len(jobs), "indexed": len(index), "due_for_catch_up": due})
    for job_id, run_id, job_status in jobs:
        got, want = index.get(job_id), latest.get(run_id)
        if (got is None) != (run_id not in latest):
            out["in_one_only"] += 1
        elif (
            got is not None and got.final != want and not (want is None and got.final != got.final)
        ):
            out["value_differs"] += 1
        if run_id not in status:
            out["run_missing"] += 1
        elif status[run_id] != MLFLOW_STATUS[job_status]:
            out["run_status_differs"] += 1
    return out


def check_journals(root: Path, home: Path, codes: dict[str, int | None]) -> dict[str, Any]:
    """Each study's journal reads whole, its trials are final, ended and indexed as it says."""
    from air_skills.runtime.store import results_index
    from air_skills.runtime.store.store import Store
    from autoresearch.journal.journal import Journal, replay

    store = Store(home)
    out: dict[str, Any] = {"studies": 0, "journals_ok": 0, "loops_exit_0": 0, "trials": 0,
                           "problems": []}  # fmt: skip
    try:
        for folder in sorted((root / "studies").iterdir()):
            out["studies"] += 1
            journal = Journal(folder)
            state = replay(journal.read())
            bad = [f"{len(journal.skipped) + len(state.skipped)} skipped"] if (
                journal.skipped or state.skipped) else []  # fmt: skip
            bad += [f"{journal.unreadable} unreadable"] if journal.unreadable else []
            trials = list(state.trials.values())
            out["trials"] += len(trials)
            ids = [t.job_id for t in trials if t.job_id]
            index = results_index.read(store, ids, "loss")
            for t in trials:
                if not t.status.is_final():
                    bad.append(f"trial {t.number} {t.status}")
                    continue
                row = store.row(t.job_id) if t.job_id else None
                if t.job_id and (row is None or row.status not in TERMINAL):
                    bad.append(f"trial {t.number}'s job {t.job_id} not ended")
                got = index.get(t.job_id) if t.job_id else None
                if t.value is not None and (got is None or got.final != t.value):
                    bad.append(f"trial {t.number}: journal {t.value}, index {got}")
            code = codes.get(folder.name)
            out["loops_exit_0"] += code == 0
            if code != 0:
                bad.append(f"loop exit {code}")
            out["journals_ok"] += not bad
            out["problems"] += [f"{folder.name}: {b}" for b in bad[:3]]
    finally:
        store.close()
    return out


# --- the runs ------------------------------------------------------------------------------------


def soak(args: argparse.Namespace) -> dict[str, Any]:
    from air_skills import Client

    env = {"AIR_CPU_SLOTS": str(args.cpu_slots), "AIR_SUPERVISOR_LINGER_S": "60"}  # the default
    with scratch_home(gpus=args.gpus, **env) as home:
        root = home.parent
        workdir = root / "work"
        workdir.mkdir()
        (workdir / "trial.py").write_text(TRIAL)
        owner = Client()
        clients = []
        for i in range(args.identities):
            token = owner.add_identity(f"agent{i}", f"team{i}", unsandboxed=True)
            clients.append(owner.as_identity(owner.identity_for_token(token)))
        db = home / "air.db"
        rng = random.Random(41)
        t0 = time.time()
        studies: dict[str, subprocess.Popen[bytes]] = {}
        every = args.minutes * 60 * 0.8 / max(1, args.studies)
        launched, refused, loads, peak = 0, 0, [], 0
        launch_ms: list[float] = []
        next_report = t0
        while True:
            now = time.time()
            elapsed = now - t0
            if elapsed >= args.max_minutes * 60:
                break
            if elapsed >= args.minutes * 60 and launched >= args.jobs:
                break
            while len(studies) < args.studies and elapsed >= len(studies) * every:
                k = len(studies)
                spec = _study(k, workdir, args.study_trials, 2, [0.5, 1.0, 2.0, 5.0])
                studies[spec["name"]] = _start_study(root, spec)
            live = _count(db, "SELECT count(*) FROM jobs WHERE status IN ('QUEUED','RUNNING')")
            peak = max(peak, live)
            if now >= next_report:
                loads.append(os.getloadavg()[0])
                done = _count(db, f"SELECT count(*) FROM jobs WHERE status IN {TERMINAL}")
                print(f"{elapsed / 60:5.1f} min: {launched} launched, {done} ended, {live} live,"
                      f" load {loads[-1]:.1f}", flush=True)  # fmt: skip
                next_report = now + 30
            if live >= args.in_flight:
                time.sleep(0.05)
                continue
            client = clients[launched % len(clients)]
            try:
                t_launch = time.perf_counter()
                client.launch(_job(rng, launched, workdir))
                launch_ms.append((time.perf_counter() - t_launch) * 1000)
                launched += 1
            except Exception as exc:  # counted and shown: the soak goes on
                refused += 1
                print(f"launch refused: {type(exc).__name__}: {exc}"[:300], flush=True)
        launch_s = time.time() - t0
        deadline = time.time() + 900
        while time.time() < deadline:
            live = _count(db, f"SELECT count(*) FROM jobs WHERE status NOT IN {TERMINAL}")
            if live == 0 and all(p.poll() is not None for p in studies.values()):
                break
            time.sleep(1)
        wall_s = time.time() - t0
        codes = {name: p.poll() for name, p in studies.items()}
        for p in studies.values():
            if p.poll() is None:
                p.kill()
        result: dict[str, Any] = {
            "launch_minutes": round(launch_s / 60, 1),
            "wall_minutes": round(wall_s / 60, 1),
            "launched_direct": launched,
            "launch_refused": refused,
            "peak_live": peak,
            "launch_ms_p50_p99": [
                round(percentile(launch_ms, 50), 1),
                round(percentile(launch_ms, 99), 1),
            ],  # fmt: skip
            "load_min_mean_max": [
                round(min(loads), 1),
                round(sum(loads) / len(loads), 1),
                round(max(loads), 1),
            ],  # fmt: skip
        }
        result["settled"] = check_settled(db)
        result["jobs_per_s"] = round(result["settled"]["jobs"] / wall_s, 2)
        result["index_vs_mlflow"] = check_index(home)
        result["journals"] = check_journals(root, home, codes)
        owner.cancel_all("soak done")
    return result


def _air_pss_kb(home: Path) -> int:
    """PSS of air's own processes of ``home`` (loops, supervisors, the tracking writer: an
    interpreter running our modules with that AIR_HOME), this bench's process excepted."""
    total = 0
    mine = b"AIR_HOME=" + os.fsencode(home)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if not any(b"air_skills" in a or b"autoresearch" in a for a in argv[1:3]):
                continue
            if mine not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            for line in (entry / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


class PeakPss:
    """The peak of ``_air_pss_kb`` while the block runs, sampled every ``every_s``."""

    def __init__(self, home: Path, every_s: float = 0.5) -> None:
        self.home, self.every_s, self.peak_kb = home, every_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak_kb = max(self.peak_kb, _air_pss_kb(self.home))

    def __enter__(self) -> PeakPss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def busy(args: argparse.Namespace, warm: bool) -> dict[str, Any]:
    """``busy_studies`` studies of ``busy_trials`` trials of ``trial_s`` in sequence on 8
    GPUs: the GPU-busy fraction. ``warm``: a tracked job ran just before (the home's tracking
    writer is up, as after any MLflow write in the last AIR_SUPERVISOR_LINGER_S); else the
    studies start on a fresh home (no MLflow store yet, no writer)."""
    n, trials = args.busy_studies, args.busy_trials
    with scratch_home(gpus=8, AIR_SUPERVISOR_LINGER_S="60") as home:  # the default
        root = home.parent
        workdir = root / "work"
        workdir.mkdir()
        (workdir / "trial.py").write_text(TRIAL)
        if warm:
            from air_skills import Client

            job = {"command": ["sh", "-c", "echo ---; echo x: 1"], "workdir": str(workdir),
                   "experiment": "warm-up", "sandbox": "off"}  # fmt: skip
            Client().wait([Client().launch(job).job_id], timeout_s=300)
        load = os.getloadavg()[0]
        t0 = time.time()
        with PeakPss(home) as peak:
            procs = {
                f"soak-study-{k}": _start_study(
                    root, _study(k, workdir, trials, 1, [args.trial_s])
                )  # fmt: skip
                for k in range(n)
            }
            codes = {name: p.wait(timeout=900) for name, p in procs.items()}
        conn = sqlite3.connect(home / "air.db", timeout=60)
        try:
            spans = conn.execute(
                f"SELECT started_at, ended_at, json_array_length(gpus), status FROM jobs {STUDIES}"
            ).fetchall()
            by_study = conn.execute(
                "SELECT json_extract(spec, '$.experiment'), created_at, started_at, ended_at"
                f" FROM jobs {STUDIES} ORDER BY seq"
            ).fetchall()
        finally:
            conn.close()
        gaps, waits, prev = [], [], {}
        for study, created, started, ended in by_study:
            if study in prev:
                gaps.append(created - prev[study])  # the loop: a trial's end -> the next launch
            waits.append(started - created)
            prev[study] = ended
        from air_skills.runtime.store import results_index
        from air_skills.runtime.store.store import Store

        store = Store(home)
        try:
            rows = store.read(
                f"SELECT job_id, started_at, ended_at FROM jobs {STUDIES} ORDER BY seq"
            )
            ids = [r[0] for r in rows]
            c0 = results_index.read(store, ids, "cmd_start")
            c1 = results_index.read(store, ids, "cmd_end")
        finally:
            store.close()
        before = [c0[j].final - s for j, s, _ in rows if j in c0]
        after = [e - c1[j].final for j, _, e in rows if j in c1]
        first = min(s for s, _, _, _ in spans)
        last = max(e for _, e, _, _ in spans)
        used = sum(n * (e - s) for s, e, n, _ in spans)
        ideal = n * trials * args.trial_s / 8 if n >= 8 else trials * args.trial_s
        return {
            "writer": "warm" if warm else "cold",
            "studies": n,
            "load_at_start": round(load, 1),
            "load_at_end": round(os.getloadavg()[0], 1),
            "air_peak_pss_mb": round(peak.peak_kb / 1024, 1),
            "trials": len(spans),
            "succeeded": sum(st == "SUCCEEDED" for *_, st in spans),
            "loops_exit_0": sum(c == 0 for c in codes.values()),
            "wall_s_from_loops_start": round(last - t0, 1),
            "ideal_s": ideal,
            "gpu_busy_from_loops_start": round(used / (8 * (last - t0)), 3),
            "gpu_busy_from_first_trial": round(used / (8 * (last - first)), 3),
            "first_trial_after_s": round(first - t0, 1),
            "ideal_over_wall": round(ideal / (last - t0), 3),
            "trial_span_s_mean": round(sum(e - s for s, e, _, _ in spans) / len(spans), 2),
            "end_to_next_launch_s_mean": round(sum(gaps) / max(1, len(gaps)), 2),
            "launch_to_start_s_mean": round(sum(waits) / len(waits), 2),
            "start_to_command_s_mean": round(sum(before) / max(1, len(before)), 2),
            "command_end_to_end_s_mean": round(sum(after) / max(1, len(after)), 2),
            "command_end_to_end_s_max": round(max(after, default=0), 2),
            "start_to_command_s_by_launch": [round(b, 1) for b in before],
            "journals": check_journals(root, home, codes),
        }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="launch for at least this long")
    ap.add_argument("--jobs", type=int, default=10_000, help="and at least this many jobs")
    ap.add_argument("--max-minutes", type=float, default=45.0, help="but never longer")
    ap.add_argument("--studies", type=int, default=20)
    ap.add_argument("--study-trials", type=int, default=12)
    ap.add_argument("--identities", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--cpu-slots", type=int, default=4)
    ap.add_argument("--in-flight", type=int, default=48, help="queued + running jobs at most")
    ap.add_argument("--busy", action="store_true", help="the 8-studies GPU-busy run instead")
    ap.add_argument("--trial-s", type=float, default=30.0)
    ap.add_argument("--busy-studies", type=int, default=8)
    ap.add_argument("--busy-trials", type=int, default=3)
    return ap


def main() -> None:
    args = parser().parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})", flush=True)
    if args.busy:
        for warm in (False, True):
            print(json.dumps(busy(args, warm), indent=1), flush=True)
    else:
        print(json.dumps(soak(args), indent=1))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
