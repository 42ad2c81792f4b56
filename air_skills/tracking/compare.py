"""Side-by-side comparison of jobs: config diff against the first job, latest and best values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from air_skills.errors import InvalidInput
from air_skills.vocabulary import Direction, best

if TYPE_CHECKING:
    from air_skills.tracking.mlflow import MlflowTracker


def config_diff(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    keys = sorted(set(base) | set(other))
    return {k: other.get(k) for k in keys if base.get(k) != other.get(k)}


def compare_jobs(
    rows: Sequence[Any],
    tracker: MlflowTracker,
    metric: str | None,
    direction: Direction = "minimize",
) -> list[dict[str, Any]]:
    """One entry per job row (store rows: ``job_id``, ``status``, ``spec``, ``run_id``,
    ``experiment_id``): its status, config diff against the first, and with ``metric`` its
    latest value, its best for ``direction`` and its last step (else every latest value)."""
    if not rows:
        raise InvalidInput("no jobs to compare", hint="pass two or more job ids")
    configs = [json.loads(r["spec"]).get("config", {}) for r in rows]
    tracked = {r["run_id"]: r["experiment_id"] for r in rows if r["run_id"]}
    latest_by_run = tracker.latest_many(tracked) if tracked else {}
    table = []
    for row, config in zip(rows, configs, strict=True):
        entry: dict[str, Any] = {
            "job_id": row["job_id"],
            "status": row["status"],
            "diff": config_diff(configs[0], config) if config is not configs[0] else {},
        }
        latest = latest_by_run.get(row["run_id"], {})
        if row["run_id"] and metric:
            entry["latest"] = latest.get(metric)
            if metric in latest:
                history = tracker.metric_history(row["run_id"], metric)
                if history:
                    entry["best"] = best([value for _, value, _ in history], direction)
                    entry["step"] = max(step for step, _, _ in history)
        elif row["run_id"]:
            entry["latest"] = latest
        table.append(entry)
    return table
