"""Side-by-side comparison of jobs: config diff against the first job, latest and best values."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from air_skills.errors import InvalidInput

if TYPE_CHECKING:
    from air_skills.client import Client

LOWER_IS_BETTER = ("loss", "error", "perplexity", "ppl", "mse", "mae", "rmse", "time")


def lower_is_better(metric: str) -> bool:
    return any(word in metric.lower() for word in LOWER_IS_BETTER)


def config_diff(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    keys = sorted(set(base) | set(other))
    return {k: other.get(k) for k in keys if base.get(k) != other.get(k)}


def compare_jobs(client: Client, job_ids: list[str], metric: str | None) -> list[dict[str, Any]]:
    if not job_ids:
        raise InvalidInput("no jobs to compare", hint="pass two or more job ids")
    rows = [client._row(j) for j in job_ids]
    infos = [client.get(j) for j in job_ids]
    configs = [json.loads(r["spec"]).get("config", {}) for r in rows]
    tracked = {r["run_id"]: r["experiment_id"] for r in rows if r["run_id"]}
    latest_by_run = client.tracker.latest_many(tracked) if tracked else {}
    table = []
    for info, row, config in zip(infos, rows, configs):
        entry: dict[str, Any] = {
            "job_id": info.job_id,
            "status": info.status.value,
            "diff": config_diff(configs[0], config) if config is not configs[0] else {},
        }
        latest = latest_by_run.get(row["run_id"], {})
        if row["run_id"] and metric:
            entry["latest"] = latest.get(metric)
            if metric in latest:
                history = client.tracker.client.get_metric_history(row["run_id"], metric)
                if history:
                    pick = min if lower_is_better(metric) else max
                    best = pick(history, key=lambda m: m.value)
                    entry["best"] = best.value
                    entry["step"] = max(m.step for m in history)
        elif row["run_id"]:
            entry["latest"] = latest
        table.append(entry)
    return table
