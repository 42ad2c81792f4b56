"""The caches' cost on a sandboxed launch (issue 38.5): sharing and the private folder of links.

A scratch user cache shaped like a Hugging Face hub (50 models, 20 blobs each: ~1,250
entries). Rows: sandbox_caches.plan for the user's own code as root, the first time (the ACL
walk) and after (a check per folder); for a code-editing trial (the private folder of links);
and bwrap's own start (``/bin/true``) with the caches' binds, without and with those links.

    python bench/sandbox_caches.py          # 15 bwrap starts each
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from air_skills.runtime.execution import sandbox, sandbox_caches


def _cache(root: str, models: int, blobs: int) -> None:
    for m in range(models):
        for sub in ("blobs", "refs", "snapshots/abc"):
            os.makedirs(f"{root}/huggingface/hub/models--m{m}/{sub}")
        for f in range(blobs):
            with open(f"{root}/huggingface/hub/models--m{m}/blobs/b{f}", "w") as out:
                out.write("x")


def _ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=15)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp()
    try:
        home, cache = os.path.join(scratch, "air"), os.path.join(scratch, "user", ".cache")
        os.makedirs(home)
        _cache(cache, 50, 20)
        env = {"HOME": os.path.join(scratch, "user"), "XDG_CACHE_HOME": cache}
        user = sandbox.job_user()  # as root: AIR_SANDBOX_UID (air-sandbox, else 65534)
        start = time.perf_counter()
        sandbox_caches.plan(env, home, trusted=True, user=user)
        first = (time.perf_counter() - start) * 1e3
        later = _ms(lambda: sandbox_caches.plan(env, home, trusted=True, user=user), args.n)
        trial = sandbox_caches.plan(env, home, trusted=False, user=None)
        farm_ms = _ms(lambda: sandbox_caches.plan(env, home, trusted=False, user=user), args.n)
        bwrap = sandbox.bwrap_path() or "bwrap"
        base = [bwrap, "--ro-bind", "/", "/", "--tmpfs", "/tmp", *sandbox.mount_args(trial.mounts)]
        links = sandbox.mount_args(trial.farm)

        def start_bwrap(extra: list[str]) -> None:
            subprocess.run([*base, *extra, "--", "/bin/true"], check=True)

        plain = _ms(lambda: start_bwrap([]), args.n)
        farmed = _ms(lambda: start_bwrap(links), args.n)
        print(f"load average {os.getloadavg()[0]:.2f}; {len(trial.farm)} links and folders")
        print(f"plan, user's own code: first (ACL walk) {first:.1f} ms, then {later:.2f} ms")
        print(f"plan, code-editing trial (private folder of links): {farm_ms:.2f} ms")
        print(f"bwrap start: {plain:.1f} ms plain, {farmed:.1f} ms with the links")
        print(f"ratio with/without links: {farmed / plain:.2f}x")
    finally:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
