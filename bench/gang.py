"""Gang launch: launch -> the first all-reduce of a 2-rank gloo job, `air` vs plain torchrun.

The job's rank 0 writes ``time.time()`` to a file right after its first all-reduce returns.
Plain ``python -m torch.distributed.run --standalone --nproc-per-node 2`` of the same script
is measured side by side, interleaved, and our figure is given as a ratio to it. Goal: at
most 1.2x (p50). Both pay torch's import in each rank; ours adds the launch, the supervisor,
the log prefixing and each rank's rendezvous bootstrap (runtime/execution/rank_boot.py).

    python bench/gang.py            # 5 launches each
    python bench/gang.py --n 10
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import percentile, scratch_home, table, verdict

GOAL = 1.2
JOB_CODE = """\
import sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if dist.get_rank() == 0:
    open(sys.argv[1], "w").write(repr(time.time()))
dist.destroy_process_group()
"""


def _stamp(path: Path, deadline_s: float = 120.0) -> float:
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


def plain_once(script: Path, out: Path) -> float:
    """Seconds from torchrun started to rank 0 past its first all-reduce."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc-per-node", "2", str(script), str(out)]
    start = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    took = _stamp(out) - start
    proc.wait()
    return took


def air_once(client: object, script: Path, out: Path) -> float:
    """Seconds from ``Client.launch`` called to rank 0 past its first all-reduce."""
    from air_skills import JobSpec

    spec = JobSpec(command=[sys.executable, str(script), str(out)], procs=2, track=False)
    start = time.time()
    info = client.launch(spec)  # type: ignore[attr-defined]
    took = _stamp(out) - start
    client.wait([info.job_id], timeout_s=120)  # type: ignore[attr-defined]
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5, help="launches of each kind")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-gang-"))
    script = work / "allreduce.py"
    script.write_text(JOB_CODE)
    cpus = os.cpu_count() or 1
    plain: list[float] = []
    ours: list[float] = []
    with scratch_home(gpus=0):
        from air_skills import Client

        client = Client()
        for i in range(args.n):  # interleaved: both see the same machine load
            plain.append(plain_once(script, work / f"plain-{i}"))
            ours.append(air_once(client, script, work / f"air-{i}"))
    p50_plain, p50_air = percentile(plain, 50), percentile(ours, 50)
    ratio = p50_air / p50_plain
    print(f"2-rank gloo job, launch -> first all-reduce ({args.n} each, {cpus} CPUs)")
    print(
        table(
            ["how", "p50 s", "max s", "ratio"],
            [
                ["torchrun --standalone", p50_plain, max(plain), 1.0],
                ["air launch --procs 2", p50_air, max(ours), ratio],
            ],
        )
    )
    print(f"goal: at most {GOAL}x: {verdict(ratio, GOAL, higher_is_better=False)}")


if __name__ == "__main__":
    main()
