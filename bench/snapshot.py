"""Code snapshots: what `code: snapshot` adds to a launch, cold and warm, beside `cp -r`.

Two generated trees (200 files / 2 MB and 2,000 files / 50 MB, text files in nested folders),
each as a plain folder and as a git work tree. For each:

- **cp -r**: ``cp -r`` of the tree to a new folder (the least a private writable copy costs).
- **cold**: the first launch's code work in a fresh AIR_HOME: every file read, hashed and
  stored as a blob, the manifest written, then the job's private view copied from the store.
- **warm**: the same launch again with the tree unchanged: the stat cache answers every file,
  only the view is made.
- **launch +**: ``Client.launch`` (track=False) with ``code: snapshot`` minus the same with
  ``code: live``, p50 over ``--n`` warm launches (the job is ``/bin/true``).

Which copy path ran (``reflink`` where the filesystem clones, else ``copy``) is printed: these
machines are ext4, which has no reflinks. Goals: warm adds at most 20 ms to a launch of the
200-file tree and at most 1.2x ``cp -r`` on the 2,000-file tree; cold at most 1.5x ``cp -r``.

    python bench/snapshot.py            # 5 repeats, 20 launches per row
    python bench/snapshot.py --repeat 9 --n 40
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import percentile, scratch_home, table, verdict

TREES = {"200 files / 2 MB": (200, 2_000_000), "2,000 files / 50 MB": (2000, 50_000_000)}
WARM_LAUNCH_MS = 20.0
WARM_RATIO = 1.2
COLD_RATIO = 1.5


def make_tree(root: Path, files: int, total: int, git: bool) -> Path:
    """``files`` text files of ``total`` bytes in all, 20 to a folder, two levels deep."""
    rng = random.Random(files)
    root.mkdir(parents=True)
    size = total // files
    words = [f"{rng.getrandbits(40):x}" for _ in range(512)]
    for i in range(files):
        folder = root / f"pkg{i // 400}" / f"mod{i // 20}"
        folder.mkdir(parents=True, exist_ok=True)
        text = " ".join(rng.choices(words, k=size // 8 + 1))[: size - 1] + "\n"
        (folder / f"f{i}.py").write_text(text)
    if git:
        run = ["git", "-c", "user.email=b@example.com", "-c", "user.name=b"]
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        subprocess.run(["git", "add", "."], cwd=root, check=True)
        subprocess.run([*run, "commit", "-qm", "tree"], cwd=root, check=True)
    return root


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def cp_r(tree: Path, scratch: Path, repeat: int) -> float:
    times = []
    for i in range(repeat):
        dest = scratch / f"cp{i}"
        times.append(timed(lambda d=dest: subprocess.run(["cp", "-r", str(tree), str(d)],
                                                       check=True)))  # fmt: skip
        shutil.rmtree(dest)
    return statistics.median(times)


def code_work(tree: Path, repeat: int) -> tuple[float, float, str]:
    """(cold, warm) seconds of plan_code + materialize (medians), and the copy path."""
    from air_skills.runtime.job_code import materialize, plan_code

    cold, warm, method = [], [], "?"
    for _ in range(repeat):
        with scratch_home() as home:
            home.mkdir(parents=True, exist_ok=True)
            time.sleep(2.1)  # past the stat cache's racy window: the tree counts as settled
            for times in (cold, warm):
                jdir = Path(tempfile.mkdtemp(dir=home))
                started = time.perf_counter()
                materialize(home, plan_code(home, str(tree), None), jdir)
                times.append(time.perf_counter() - started)
                method = (jdir / "code.json").read_text().split('"copy": "')[1].split('"')[0]
    return statistics.median(cold), statistics.median(warm), method


def launch_delta(tree: Path, n: int) -> float:
    """p50 seconds of a warm snapshot launch minus a live one (interleaved, track=False)."""
    from air_skills import Client

    with scratch_home(gpus=0):
        client = Client()
        spec = {"command": ["/bin/true"], "workdir": str(tree), "track": False}
        client.launch(spec)  # cold: store the tree, import what launches import
        time.sleep(2.1)
        client.launch(spec)  # now the stat cache holds every file
        snap, live = [], []
        for _ in range(n):
            snap.append(timed(lambda: client.launch(spec)))
            live.append(timed(lambda: client.launch({**spec, "code": "live"})))
        client.cancel_all()
    return percentile(snap, 50) - percentile(live, 50)


def goal(name: str, what: str, value: float, limit: float, unit: str) -> str:
    return f"{name}: {what} {value:.2f}{unit} ({verdict(value, limit, False)} {limit:g}{unit})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="repeats per cold/warm/cp figure")
    parser.add_argument("--n", type=int, default=20, help="launches per launch row (0: skip)")
    args = parser.parse_args()
    rows, goals = [], []
    scratch = Path(tempfile.mkdtemp(prefix="air-bench-snap-"))
    try:
        for label, (files, total) in TREES.items():
            for git in (False, True):
                tree = make_tree(scratch / f"{files}-{git}", files, total, git)
                cp = cp_r(tree, scratch, args.repeat)
                cold, warm, method = code_work(tree, args.repeat)
                small = files == 200
                delta = launch_delta(tree, args.n) if small and args.n else float("nan")
                kind = "git" if git else "folder"
                rows.append([label, kind, method, cp * 1e3, cold * 1e3, cold / cp, warm * 1e3,
                             warm / cp, delta * 1e3])  # fmt: skip
                name = f"{label} {kind}"
                goals.append(goal(name, "cold", cold / cp, COLD_RATIO, "x cp -r"))
                if not small:
                    goals.append(goal(name, "warm", warm / cp, WARM_RATIO, "x cp -r"))
                elif args.n:
                    goals.append(goal(name, "warm launch +", delta * 1e3, WARM_LAUNCH_MS, " ms"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(table(["tree", "kind", "copy", "cp -r ms", "cold ms", "cold/cp", "warm ms",
                 "warm/cp", "launch + ms"], rows))  # fmt: skip
    print()
    print("\n".join(goals))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
