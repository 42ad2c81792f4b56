"""Side-by-side comparison of jobs: config and command diffs, a metric's latest, best, at a step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from air_skills.errors import InvalidInput, UnknownMetric
from air_skills.gpu.hardware import hardware_class, not_comparable, read_record
from air_skills.vocabulary import Direction, best

if TYPE_CHECKING:
    from air_skills.runtime.store.records import JobRecord
    from air_skills.tracking.mlflow import MlflowTracker

NOT_SET = "not set (script default)"  # a key one job's config lacks: its script's default ran


def config_diff(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The keys whose values differ from ``base``'s; a key ``other`` lacks reads ``NOT_SET``."""
    keys = sorted(set(base) | set(other))
    return {k: other.get(k, NOT_SET) for k in keys if base.get(k, NOT_SET) != other.get(k, NOT_SET)}


def value_at(points: Sequence[tuple[int, float]], step: int) -> tuple[int, float] | None:
    """The (step, value) logged at ``step``, or the last one before it; None if none is."""
    found = None
    for point in points:
        if point[0] > step:
            break
        found = point
    return found


def score(
    points: Sequence[tuple[int, float]], direction: Direction, at_step: int | None = None
) -> dict[str, Any]:
    """One metric's summary for one run: latest, its step, best and its step (and at a step)."""
    if not points:
        return {}
    best_value = best([v for _, v in points], direction)
    best_step = next(s for s, v in points if v == best_value)
    out: dict[str, Any] = {
        "latest": points[-1][1],
        "step": points[-1][0],
        "best": best_value,
        "best_step": best_step,
    }
    if at_step is not None:
        hit = value_at(points, at_step)
        out["at_step"] = None if hit is None else {"step": hit[0], "value": hit[1]}
    return out


def metric_scores(
    rows: Sequence[JobRecord],
    tracker: MlflowTracker,
    metric: str,
    direction: Direction = "minimize",
    at_step: int | None = None,
) -> dict[str, dict[str, Any]]:
    """``score`` per job (their records: ``job_id``, ``run_id``); {} for a job without points."""
    runs = [r.run_id for r in rows if r.run_id]
    histories = tracker.metric_histories(runs, metric) if runs else {}
    return {
        r.job_id: score(histories.get(r.run_id, []), direction, at_step) for r in rows if r.run_id
    }


def check_order(order_by: str, metric: str | None) -> None:
    """Refuse an ordering that cannot be done: it is by a metric's best or latest value."""
    if order_by not in ("best", "latest") or not metric:
        raise InvalidInput(
            f"order_by={order_by!r} needs order_by 'best' or 'latest' and a metric",
            hint="pass metric='val_loss' and order_by='best'",
        )


def rank(
    items: Sequence[Any], scores: dict[str, dict[str, Any]], order_by: str, direction: Direction
) -> list[Any]:
    """Items (with ``job_id``) best first by their score's ``order_by``; unscored ones last."""
    sign = 1 if direction == "minimize" else -1

    def key(item: Any) -> tuple[int, float]:
        value = scores.get(item.job_id, {}).get(order_by)
        return (1, 0.0) if value is None else (0, sign * value)

    return sorted(items, key=key)


def _command(row: JobRecord) -> list[str]:
    return list(row.spec_dict().get("command", []))


def compare_jobs(
    rows: Sequence[JobRecord],
    tracker: MlflowTracker,
    metric: str | None,
    direction: Direction = "minimize",
    at_step: int | None = None,
    scores: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One entry per job (their records: ``job_id``, ``status``, ``spec``, ``run_id``,
    ``experiment_id``): its status, config diff against the first (and its command, when that
    differs), and with ``metric`` its latest value and step, its best for ``direction`` and
    with ``at_step`` the value at that step or just before it (else every latest value).
    A metric that no job logged is refused, naming the metrics they did log. ``scores``:
    the metric's scores per job already read (the results index), else from the histories."""
    if not rows:
        raise InvalidInput("no jobs to compare", hint="pass two or more job ids")
    if at_step is not None and not metric:
        raise InvalidInput("at_step needs a metric", hint="pass metric='val_loss' with at_step")
    configs = [r.spec_dict().get("config", {}) for r in rows]
    tracked = {r.run_id: r.experiment_id for r in rows if r.run_id}
    latest_by_run = tracker.latest_many(tracked) if tracked else {}
    if scores is None:
        scores = metric_scores(rows, tracker, metric, direction, at_step) if metric else {}
    if metric and tracked and not any(scores.values()):
        logged = sorted({k for values in latest_by_run.values() for k in values})
        raise UnknownMetric(
            f"no job logged metric {metric!r}",
            hint="metrics logged: " + (", ".join(logged) or "none yet"),
            valid_keys=logged,
        )
    first_command = _command(rows[0])
    classes = [hardware_class(read_record(r.log_path)) for r in rows]
    mixed = not_comparable(classes)  # each entry then names its class (and the note)
    table = []
    for row, config in zip(rows, configs, strict=True):
        entry: dict[str, Any] = {
            "job_id": row.job_id,
            "status": row.status,
            "diff": config_diff(configs[0], config) if config is not configs[0] else {},
        }
        if _command(row) != first_command:
            entry["command"] = _command(row)
        if row.run_id and metric:
            entry["latest"] = latest_by_run.get(row.run_id, {}).get(metric)
            entry.update(scores.get(row.job_id, {}))
        elif row.run_id:
            entry["latest"] = latest_by_run.get(row.run_id, {})
        if mixed:
            entry["hardware"] = f"{classes[len(table)] or 'unknown'} ({mixed})"
        table.append(entry)
    return table
