"""`air gc`'s retention policy at scale (issue 41.6): N finished jobs, each with a real MLflow run
(one metric logged) in the home's sqlite store, then ``retention.collect(keep_last=K)`` (what
`air gc --keep-last K` runs): seconds to plan (dry run) and to remove, runs deleted, per 1,000.

    .venv/bin/python bench/gc_retention.py [--jobs 5000] [--keep 100] [--template DIR]

``--template DIR``: the filled home is copied there once and reused by later runs (the fill
takes ~0.1 s a job on a loaded machine: before/after on the same jobs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from _common import scratch_home, table


def fill(home: Path, n: int) -> None:
    """``n`` finished jobs recorded as a launch records them, each with its own MLflow run."""
    from air_skills.models import JobSpec
    from air_skills.runtime.store.store import Store, new_job_id
    from air_skills.status import JobStatus
    from air_skills.tracking.mlflow import MlflowTracker, tracking_uri

    client = MlflowTracker(home, tracking_uri(home)).client
    exp = client.get_experiment_by_name("gc") or client.get_experiment(
        client.create_experiment("gc")
    )
    store = Store(home)
    data = JobSpec(command=["true"], experiment="gc").model_dump(mode="json")
    try:
        for i in range(n):
            run = client.create_run(exp.experiment_id)
            client.log_metric(run.info.run_id, "loss", 1.0 + i / n, step=0)
            job_id = new_job_id()
            jdir = home / "jobs" / job_id
            jdir.mkdir(parents=True)
            (jdir / "output.log").write_text("loss: 1\n")
            with store.tx() as c:
                store.queue(
                    {**data, "config": {"seed": i}}, job_id, str(jdir / "output.log"), f"j{i}",
                    run_id=run.info.run_id, experiment_id=exp.experiment_id,
                    project="default", jdir=jdir, c=c,
                )  # fmt: skip
                store.mark_running(c, job_id, [], 1, False)
                store.finish(job_id, JobStatus.SUCCEEDED, message="SUCCEEDED", exit_code=0, c=c)
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--keep", type=int, default=100)
    ap.add_argument("--template", type=Path, default=None, help="a filled home to reuse")
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})")
    with scratch_home(gpus=1) as home:
        from air_skills import Client
        from air_skills.runtime.runs import retention

        t0 = time.perf_counter()
        if args.template is not None and args.template.is_dir():
            shutil.rmtree(home, ignore_errors=True)
            shutil.copytree(args.template, home, symlinks=True)
        else:
            Client()
            fill(home, args.jobs)
            if args.template is not None:
                shutil.copytree(home, args.template, symlinks=True)
        fill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        dry = retention.collect(home, keep_last=args.keep, dry_run=True)
        dry_s = time.perf_counter() - t0
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        done = retention.collect(home, keep_last=args.keep)
        gc_s = time.perf_counter() - t0
        left = Client().store.read("SELECT COUNT(*) FROM jobs", ())[0][0]
    removed = done["jobs_removed"]
    print(
        table(
            [
                "jobs",
                "removed",
                "runs deleted",
                "errors",
                "dry run s",
                "gc s",
                "gc s / 1,000 jobs",
                "jobs left",
                "fill s",
            ],
            [
                [
                    args.jobs,
                    removed,
                    done["runs_deleted"],
                    len(done["errors"]),
                    round(dry_s, 2),
                    round(gc_s, 2),
                    round(gc_s / max(1, removed) * 1000, 2),
                    left,
                    round(fill_s),
                ]
            ],
        )  # fmt: skip
    )
    print(f"load average before the gc: {load:.1f}; dry run said {dry['jobs_removed']} jobs")


if __name__ == "__main__":
    main()
