"""The Ray row of the launch benchmark: ``Client.launch`` (backend ray) -> first instruction.

``measure(n)`` is what ``bench/launch.py`` imports: it starts a throwaway local Ray head (or
uses RAY_ADDRESS when set), launches the same ``python -S`` job as the other rows ``n`` times,
one after another, and returns the seconds from ``launch()`` called to the job's first
instruction. Run alone, it prints the Ray row beside raw Popen, our local backend and Ray's
own `submit_job` of the same job (what AIR adds on top of Ray):

    python bench/launch_ray.py --n 10
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import percentile, scratch_home, table

WARMUP = 2  # the first Ray jobs also start Ray's worker processes


def measure(n: int, address: str | None = None) -> list[float] | None:
    """Seconds from launch() to the job's first instruction, ``n`` Ray jobs in a row.

    None when Ray is not installed here.
    """
    rows = measure_rows(n, address, sdk=False)
    return None if rows is None else rows["air"]


def measure_rows(
    n: int, address: str | None = None, sdk: bool = True
) -> dict[str, list[float]] | None:
    """``air``: through ``Client.launch``; ``sdk``: Ray's own ``submit_job`` of the same
    command and working_dir, interleaved (what AIR adds on top of Ray)."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        return None
    from launch_probe import _read_stamp, job_command

    from air_skills import Client, JobSpec, JobStatus
    from air_skills.backends.ray import RayBackend
    from air_skills.testing.ray_head import LocalRayHead

    head = None
    address = address or os.environ.get("RAY_ADDRESS")
    saved = os.environ.get("RAY_ADDRESS")
    if not address:
        head = LocalRayHead(num_gpus=4, num_cpus=2)
        address = head.start()
    os.environ["RAY_ADDRESS"] = address
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            workdir = root / "wd"
            workdir.mkdir()
            client = Client(root / "air_home")
            ray = JobSubmissionClient(address)
            out: dict[str, list[float]] = {"air": [], "sdk": []}
            for i in range(WARMUP + n):
                stamp = root / f"air-{i}"
                spec = JobSpec(
                    command=job_command(stamp),
                    gpus=1,
                    track=False,
                    backend="ray",
                    workdir=str(workdir),
                    name="bench-launch-ray",
                )
                t0 = time.time()
                info = client.launch(spec)
                first = _read_stamp(stamp, deadline_s=120) - t0
                (done,) = client.wait([info.job_id], timeout_s=120)
                if done.status != JobStatus.SUCCEEDED:
                    raise RuntimeError(f"ray bench job {done.job_id} ended {done.status}")
                if i >= WARMUP:
                    out["air"].append(first)
                if not sdk:
                    continue
                stamp = root / f"sdk-{i}"
                t0 = time.time()
                sid = ray.submit_job(
                    entrypoint=RayBackend.entrypoint(job_command(stamp)),
                    runtime_env={"working_dir": str(workdir), "env_vars": _sdk_env(root, i)},
                    entrypoint_num_gpus=1,
                    entrypoint_num_cpus=1,
                )
                first = _read_stamp(stamp, deadline_s=120) - t0
                while not ray.get_job_status(sid).is_terminal():
                    time.sleep(0.02)
                if i >= WARMUP:
                    out["sdk"].append(first)
            return out
    finally:
        if saved is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = saved
        if head is not None:
            head.stop()


def _sdk_env(root: Path, i: int) -> dict[str, str]:
    folder = root / f"sdk-job-{i}"
    return {
        "AIR_CHECKPOINT_DIR": f"{folder}/checkpoints",
        "AIR_DATA_DIR": f"{folder}/data",
        "AIR_CONFIG_FILE": f"{folder}/config.json",
        "AIR_CONFIG_JSON": "{}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="launches per row")
    args = parser.parse_args(argv)
    from launch_probe import air_once, raw_once

    with scratch_home(gpus=4) as home, tempfile.TemporaryDirectory() as tmp:
        from air_skills import Client

        stamps = Path(tmp)
        client = Client(home)
        raw: list[float] = []
        local: list[float] = []
        for i in range(3 + args.n):  # three to warm up, then interleaved
            r = raw_once(stamps / f"raw-{i}")
            a = air_once(client, stamps / f"air-{i}", track=False)[0]
            if i >= 3:
                raw.append(r)
                local.append(a)
        ray = measure_rows(args.n)
    if ray is None:
        print("Ray is not installed here: pip install 'air-skills[ray]'")
        return 1
    ms = 1000.0
    raw50, local50 = percentile(raw, 50), percentile(local, 50)
    rows = [
        [name, len(v), percentile(v, 50) * ms, percentile(v, 95) * ms,
         percentile(v, 50) / raw50, percentile(v, 50) / local50]
        for name, v in (("raw subprocess.Popen", raw), ("air launch, local", local),
                        ("ray submit_job (Ray's SDK)", ray["sdk"]),
                        ("air launch, ray (local head)", ray["air"]))
    ]  # fmt: skip
    print(f"launch -> first instruction, {args.n} launches each, {os.cpu_count()} CPUs\n")
    print(table(["path", "n", "p50 ms", "p95 ms", "x raw", "x local"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
