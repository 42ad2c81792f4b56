"""Metric reads at scale: 100 runs x 1,000 steps x 3 metrics in a real MLflow sqlite store.

Times `Client.metrics` for the latest values of all runs and for full downsampled histories,
as ratios to a direct SQL read of the same rows from MLflow's own database (the floor).

    python bench/metrics.py [--runs 100] [--steps 1000]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from pathlib import Path


def populate(client, runs: int, steps: int) -> list[str]:
    """Create jobs whose MLflow runs hold ``steps`` points of 3 metrics each."""
    from mlflow.entities import Metric

    from air_skills.models import JobSpec
    from air_skills.runtime.store.store import new_job_id
    from air_skills.status import JobStatus

    tracker = client.tracker
    ids = []
    for r in range(runs):
        job_id = new_job_id()
        run_id, exp_id = tracker.create_run(
            job_id=job_id,
            name=f"bench-{r}",
            experiment="bench-metrics",
            config={"lr": 10 ** -(r % 4)},
            tags={},
        )
        spec = JobSpec(command=["true"], track=False)
        client.store.queue(
            spec.model_dump(mode="json"),
            job_id,
            os.devnull,
            f"bench-{r}",
            run_id,
            exp_id,
            project=spec.resolved_project(),
        )
        client.store.finish(job_id, JobStatus.SUCCEEDED, message="SUCCEEDED: bench")
        now = int(time.time() * 1000)
        points = [
            Metric(key, 1.0 / (s + 1) + r * 1e-3 + k, now + s, s)
            for s in range(steps)
            for k, key in enumerate(("train_loss", "val_loss", "lr"))
        ]
        for i in range(0, len(points), 1000):
            tracker.client.log_batch(run_id, metrics=points[i : i + 1000])
        ids.append(job_id)
    return ids


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--max-points", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AIR_HOME"] = tmp
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        from air_skills import Client

        client = Client(tmp)
        t0 = time.perf_counter()
        ids = populate(client, args.runs, args.steps)
        print(
            f"populated {args.runs} runs x {args.steps} steps x 3 metrics "
            f"in {time.perf_counter() - t0:.1f}s"
        )
        run_ids = [client.store.row(j).run_id for j in ids]
        db = sqlite3.connect(Path(tmp) / "mlflow.db")
        marks = ",".join("?" * len(run_ids))

        def sql_latest() -> None:
            db.execute(
                f"SELECT run_uuid, key, value FROM latest_metrics WHERE run_uuid IN ({marks})",
                run_ids,
            ).fetchall()

        def sql_history() -> None:
            db.execute(
                f"SELECT run_uuid, key, step, value FROM metrics WHERE run_uuid IN ({marks})"
                " ORDER BY run_uuid, key, step",
                run_ids,
            ).fetchall()

        def ours_latest() -> None:
            for j in ids:
                client.metrics(j)

        def ours_latest_many() -> None:
            rows = [client.store.row(j) for j in ids]
            client.tracker.latest_many({r.run_id: r.experiment_id for r in rows})

        def ours_history() -> None:
            for j in ids:
                client.metrics(j, history=True, max_points=args.max_points)

        rows = [
            ("latest, all runs (Client.metrics each)", timed(ours_latest), timed(sql_latest)),
            ("latest, all runs (one search)", timed(ours_latest_many), timed(sql_latest)),
            (
                f"history (<= {args.max_points} pts/key), all runs",
                timed(ours_history, 1),
                timed(sql_history),
            ),
        ]
        print(f"{'read':42} {'ours':>15} {'direct SQL':>12} {'ratio':>8}")
        for name, ours, floor in rows:
            print(f"{name:42} {ours * 1000:13.1f}ms {floor * 1000:10.1f}ms {ours / floor:7.1f}x")
        per_run = rows[0][1] / len(ids) * 1000
        print(f"per run: latest {per_run:.2f} ms, history {rows[2][1] / len(ids) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
