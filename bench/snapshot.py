"""Code snapshots: what `code: snapshot` adds to a launch, cold and warm, beside `cp -r`.

Two generated trees (200 files / 2 MB and 2,000 files / 50 MB, text files in nested folders),
each as a plain folder and as a git work tree. For each:

- **cp -r**: ``cp -r`` of the tree to a new folder (the least a private writable copy costs).
- **cold**: the first launch's code work in a fresh AIR_HOME: every file read once, hashed,
  stored as a blob and written to the job's private view from the same bytes.
- **warm**: the same launch again with the tree unchanged: the stat cache answers every file,
  only the view is made (copied from the store).
- **launch +**: ``Client.launch`` (track=False) with ``code: snapshot`` minus the same with
  ``code: live``, p50 over ``--n`` warm launches (the job is ``/bin/true``).

Each repeat times ``cp -r``, cold and warm one after the other (the same conditions), each
after ``os.sync()`` (no step pays for the writeback of the one before); the ratios are taken
per repeat, then their median is shown. The ``copy`` column is the view's path, cold/warm:
``written`` (from the bytes the snapshot read), ``reflink`` where the filesystem clones, else
``copy`` (``copy_file_range``): these machines are ext4, which has no reflinks. Goals: warm
adds at most 20 ms to a launch of the 200-file tree and at most 1.2x ``cp -r`` on the
2,000-file tree; cold at most 1.5x ``cp -r``.

    python bench/snapshot.py            # 5 repeats, 20 launches per row
    python bench/snapshot.py --repeat 9 --n 40
"""

from __future__ import annotations

import argparse
import json
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
    """Seconds ``fn`` takes, from no dirty pages: what an earlier step wrote (50 MB a copy)
    is flushed first, not charged to whichever step the kernel's writeback throttles."""
    os.sync()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def cp_r(tree: Path, scratch: Path) -> float:
    dest = scratch / "cp"
    took = timed(lambda: subprocess.run(["cp", "-r", str(tree), str(dest)], check=True))
    shutil.rmtree(dest)
    return took


def code_work(tree: Path, scratch: Path, repeat: int) -> dict[str, float | str]:
    """Medians of ``cp -r`` and of plan_code + materialize cold and warm, each repeat's three
    measured one after the other (the same conditions), with the ratios taken per repeat, and
    the copy paths that ran (cold/warm)."""
    from air_skills.runtime.code.job_code import materialize, plan_code

    runs: dict[str, list[float]] = {"cp": [], "cold": [], "warm": [], "cold/cp": [], "warm/cp": []}
    methods = ["?", "?"]
    for _ in range(repeat):
        with scratch_home() as home:
            home.mkdir(parents=True, exist_ok=True)
            time.sleep(2.1)  # past the stat cache's racy window: the tree counts as settled
            cp = cp_r(tree, scratch)
            for i, kind in enumerate(("cold", "warm")):
                jdir = Path(tempfile.mkdtemp(dir=home))
                work = lambda j=jdir: materialize(home, plan_code(home, str(tree), None), j)  # noqa: E731
                runs[kind].append(timed(work))
                runs[f"{kind}/cp"].append(runs[kind][-1] / cp)
                methods[i] = json.loads((jdir / "code.json").read_text())["copy"]
            runs["cp"].append(cp)
    out: dict[str, float | str] = {k: statistics.median(v) for k, v in runs.items()}
    out["copy"] = "/".join(methods)
    return out


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
                got = code_work(tree, scratch, args.repeat)
                small = files == 200
                delta = launch_delta(tree, args.n) if small and args.n else float("nan")
                kind = "git" if git else "folder"
                rows.append([label, kind, got["copy"], *(float(got[k]) * f for k, f in
                             (("cp", 1e3), ("cold", 1e3), ("cold/cp", 1), ("warm", 1e3),
                              ("warm/cp", 1))), delta * 1e3])  # fmt: skip
                cold, warm = float(got["cold/cp"]), float(got["warm/cp"])
                name = f"{label} {kind}"
                goals.append(goal(name, "cold", cold, COLD_RATIO, "x cp -r"))
                if not small:
                    goals.append(goal(name, "warm", warm, WARM_RATIO, "x cp -r"))
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
