"""The results index: per job and metric, what a leaderboard needs, kept in air.db.

One row per (job, metric key) in the ``results`` table: the final value and its step (the
point at the highest step, the latest logged on a tie), whether that final value is finite
(results/finite.py's rule), the lowest and the highest finite value with their steps, and the
number of points. A job's rows are written when it ends (runtime/runs/run_index.py, on every
path that ends a job's MLflow run) and, while it runs, whenever a reader catches up on it;
``jobs.results_at`` says that a job's rows are final. MLflow stays the record: `air doctor
--rebuild` rebuilds these rows from it (``forget_all`` then the catch-up).

Readers (the leaderboard in ``Client.list(metric=, order_by=)``, ``Client.scores``, seed
groups, compare, wait, a study's prior jobs) read these rows, never whole histories:

- ``leaderboard(store, key, order_by, direction, where, limit, offset)``: every matching job
  ranked by one SQL query over an index, however many jobs there are;
- ``read(store, job_ids, key)``: {job_id: MetricResult} for some jobs;
- ``MetricResult.score(direction)``: the ``latest``/``step``/``best``/``best_step`` dict that
  ``Client.scores`` gives (plus ``points`` and ``finite``).

Stdlib only, pydantic-free, like the rest of the runtime.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from air_skills.runtime.results.finite import is_finite_value
from air_skills.runtime.store.db import Database
from air_skills.runtime.store.records import JOB_COLUMNS, JOB_FIELDS, JobRecord, record_in_home
from air_skills.status import JobStatus

TERMINAL_SQL = "(" + ",".join(f"'{s.value}'" for s in JobStatus if s.is_terminal()) + ")"
STUDY_TAG = "autoresearch.study.study"  # the tag a study's trials carry (autoresearch/loop)
ORDERS = ("best", "latest")
FEW = 1000  # a filter matching at most this many jobs ranks them from the jobs' side

_RESULT_COLUMNS = (
    "key, final_value, final_step, final_finite, low_value, low_step, high_value, high_step, points"
)


@dataclass(frozen=True, slots=True)
class MetricResult:
    """One metric of one job, summarised. ``final`` may be non-finite (nan, +-inf, float max);
    ``low``/``high`` are over the finite points only (None: no finite point)."""

    key: str
    final: float
    final_step: int
    points: int
    low: float | None = None
    low_step: int | None = None
    high: float | None = None
    high_step: int | None = None

    @property
    def finite(self) -> bool:
        """Whether the final value is a usable number (results/finite.py)."""
        return is_finite_value(self.final)

    def best(self, direction: str) -> tuple[float, int] | None:
        """(value, step) of the best finite point for ``direction``; None if none is finite."""
        if direction == "maximize":
            return None if self.high is None else (self.high, int(self.high_step or 0))
        return None if self.low is None else (self.low, int(self.low_step or 0))

    def score(self, direction: str) -> dict[str, Any]:
        """``latest``, ``step``, ``best``, ``best_step`` (as ``Client.scores`` gives them),
        ``points`` and ``finite``. With no finite point, ``best`` is the final value."""
        found = self.best(direction)
        best_value, best_step = found if found else (self.final, self.final_step)
        return {
            "latest": self.final,
            "step": self.final_step,
            "best": best_value,
            "best_step": best_step,
            "points": self.points,
            "finite": self.finite,
        }


def summarize(key: str, points: Sequence[tuple[int, float, int]]) -> MetricResult | None:
    """The summary of one metric's points ((step, value, ts), sorted by step then time);
    None for no points. The best step is the first step that reached the best value."""
    if not points:
        return None
    low = high = None
    low_step = high_step = None
    for step, value, _ in points:
        if not is_finite_value(value):
            continue
        if low is None or value < low:
            low, low_step = value, step
        if high is None or value > high:
            high, high_step = value, step
    last = points[-1]
    return MetricResult(
        key, float(last[1]), int(last[0]), len(points), low, low_step, high, high_step
    )


def summarize_run(points: dict[str, Sequence[tuple[int, float, int]]]) -> list[MetricResult]:
    """Every metric of one run summarised (``points``: key -> its sorted points)."""
    out = [summarize(k, p) for k, p in sorted(points.items())]
    return [r for r in out if r is not None]


# --- writes ----------------------------------------------------------------------------------


def write(
    store: Database,
    job_id: str,
    results: Iterable[MetricResult],
    *,
    final: bool,
    c: sqlite3.Connection | None = None,
) -> bool:
    """Replace the job's rows with ``results``; ``final`` marks them as the job's end's
    (``jobs.results_at``). A live (not final) write never replaces final rows: a reader that
    caught up on a running job just before its end cannot undo the end's write. Returns
    whether it wrote."""
    now = time.time()
    with store._maybe_tx(c) as cx:
        row = cx.execute("SELECT seq, results_at FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row is None or (not final and row[1] is not None):
            return False
        seq = row[0]
        cx.execute("DELETE FROM results WHERE job_id=?", (job_id,))
        cx.executemany(
            "INSERT INTO results (job_id, seq, key, final_value, final_step, final_finite,"
            " latest_value, low_value, low_step, high_value, high_step, points, updated_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    job_id,
                    seq,
                    r.key,
                    _stored(r.final),
                    r.final_step,
                    int(r.finite),
                    r.final if r.finite else None,
                    r.low,
                    r.low_step,
                    r.high,
                    r.high_step,
                    r.points,
                    now,
                )
                for r in results
            ],
        )
        if final:
            cx.execute("UPDATE jobs SET results_at=? WHERE job_id=?", (now, job_id))
    return True


def forget_all(store: Database) -> int:
    """Drop every row and mark every job as not indexed (the start of a rebuild from MLflow);
    returns how many jobs the next catch-up will read."""
    with store.tx() as c:
        c.execute("DELETE FROM results")
        c.execute("UPDATE jobs SET results_at=NULL WHERE results_at IS NOT NULL")
        n = c.execute("SELECT COUNT(*) FROM jobs WHERE run_id IS NOT NULL").fetchone()[0]
    return int(n)


# --- reads -------------------------------------------------------------------------------------


def due(store: Database, job_ids: Sequence[str] | None = None) -> list[JobRecord]:
    """The jobs whose rows a reader should bring up to date first: ended but not yet indexed
    (their end was cut short: a kill, an old home) and running ones (their metrics arrive).
    Both through small indexes: a pass over every job is never needed. ``job_ids``: only
    these jobs."""
    cols = _job_columns("j")
    # The terms of the partial index jobs_results_due as they are written there, and the
    # status not through its own index (``+``): the due jobs are found among a few rows.
    where = (
        "j.results_at IS NULL AND j.run_id IS NOT NULL AND +j.status IN "
        + TERMINAL_SQL.replace(")", ",'RUNNING')")
    )
    args: tuple[Any, ...] = ()
    if job_ids is not None:
        if not job_ids:
            return []
        where += f" AND j.job_id IN ({','.join('?' * len(job_ids))})"
        args = tuple(job_ids)
    rows = store.read(f"SELECT {cols} FROM jobs j WHERE {where} ORDER BY j.seq", args)
    return [record_in_home(r, store.home) for r in rows]


def read(store: Database, job_ids: Sequence[str], key: str) -> dict[str, MetricResult]:
    """{job_id: its result for ``key``} for those of ``job_ids`` that have one."""
    out: dict[str, MetricResult] = {}
    ids = list(dict.fromkeys(job_ids))
    for i in range(0, len(ids), 900):
        chunk = ids[i : i + 900]
        rows = store.read(
            f"SELECT job_id, {_RESULT_COLUMNS} FROM results WHERE key=?"
            f" AND job_id IN ({','.join('?' * len(chunk))})",
            (key, *chunk),
        )
        out.update({r[0]: _result(r[1:]) for r in rows})
    return out


def keys(store: Database, job_ids: Sequence[str]) -> list[str]:
    """The metric keys some of ``job_ids`` logged (sorted): what to name when one is missing."""
    ids = list(dict.fromkeys(job_ids))[:900]
    if not ids:
        return []
    rows = store.read(
        f"SELECT DISTINCT key FROM results WHERE job_id IN ({','.join('?' * len(ids))})",
        tuple(ids),
    )
    return sorted(r[0] for r in rows)


@dataclass
class Where:
    """The filters of a leaderboard (each None: any). ``config``: {key: value} of the job's
    config (a dotted key reaches into a nested dict); ``study``: a study's name (its trials'
    tag); ``job_ids``: only these jobs (a batch)."""

    status: str | None = None
    experiment: str | None = None
    project: str | None = None
    launched_by: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    study: str | None = None
    job_ids: Sequence[str] | None = None

    def sql(self, alias: str = "j") -> tuple[str, list[Any]]:
        """A WHERE clause over ``jobs`` (as ``alias``) and its arguments."""
        a = alias
        parts: list[str] = []
        args: list[Any] = []
        plain = (
            (f"{a}.status=?", self.status),
            (f"json_extract({a}.spec, '$.experiment') IS ?", self.experiment),
            (f"{a}.project=?", self.project),
            (f"{a}.launched_by=?", self.launched_by),
        )
        for sql, value in plain:
            if value is not None:
                parts.append(sql)
                args.append(value)
        for k, v in sorted(self.config.items()):
            parts.append(f"json_extract({a}.spec, ?) IS ?")
            args += [_json_path("config", *k.split(".")), _sql_value(v)]
        if self.study is not None:
            parts.append(f"json_extract({a}.spec, ?)=?")
            args += [_json_path("tags", STUDY_TAG), self.study]
        if self.job_ids is not None:
            ids = list(self.job_ids)
            parts.append(f"{a}.job_id IN ({','.join('?' * len(ids))})" if ids else "0")
            args += ids
        return " AND ".join(parts) or "1=1", args

    @property
    def empty(self) -> bool:
        return self.sql()[0] == "1=1"


@dataclass(frozen=True)
class Board:
    """One page of a leaderboard: jobs best first (those with no finite value for the key
    after them, newest first), their results, and the counts."""

    rows: list[tuple[JobRecord, MetricResult | None]]
    ranked: int | None  # matching jobs with a finite value to rank by (None: not counted)
    total: int  # matching jobs in all
    next_offset: int | None


def leaderboard(
    store: Database,
    key: str,
    order_by: str = "best",
    direction: str = "minimize",
    where: Where | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Board:
    """Every job that matches ``where`` ranked by ``key``'s best (or latest) value for
    ``direction``, best first (ties: oldest first when minimising, newest first when
    maximising: the order of the index), then the jobs without a finite value for it, newest
    first; the ``limit`` from ``offset`` on. The ranking is walked in its index's order and
    the filters are applied to the jobs met; a filter matching at most FEW jobs is applied
    first (the same order, sorted)."""
    if order_by not in ORDERS:
        raise ValueError(f"order_by {order_by!r}: use one of {ORDERS}")
    where = where or Where()
    col = (
        "latest_value"
        if order_by == "latest"
        else ("high_value" if direction == "maximize" else "low_value")
    )
    way = "DESC" if direction == "maximize" else "ASC"
    cond, args = where.sql("j")
    cols = _job_columns("j")
    rcols = ", ".join(f"r.{c.strip()}" for c in _RESULT_COLUMNS.split(","))
    ranked_from = (
        f"FROM results r JOIN jobs j ON j.job_id = r.job_id"
        f" WHERE r.key=? AND r.{col} IS NOT NULL AND {cond}"
    )
    count_ranked = (
        f"SELECT COUNT(*) FROM results WHERE key=? AND {col} IS NOT NULL"
        if where.empty  # no filter on the job: count the index alone
        # else from the jobs' side (the filter's own index, then results_job per job): from
        # the results' side every row's spec would be parsed for the filter
        else f"SELECT COUNT(*) FROM jobs j CROSS JOIN results r ON r.job_id = j.job_id"
        f" AND r.key=? WHERE r.{col} IS NOT NULL AND {cond}"
    )
    total = store.read(
        "SELECT COUNT(*) FROM jobs" if where.empty else f"SELECT COUNT(*) FROM jobs j WHERE {cond}",
        () if where.empty else tuple(args),
    )[0][0]
    if not where.empty and total <= FEW:
        # A narrow filter (one identity's jobs, a project's): its jobs first, through the
        # filter's index, then sorted; walking the ranking for its few would read it all.
        ranked_from = (
            f"FROM jobs j CROSS JOIN results r ON r.job_id = j.job_id AND r.key=?"
            f" WHERE r.{col} IS NOT NULL AND {cond}"
        )
    found = store.read(
        f"SELECT {cols}, {rcols} {ranked_from} ORDER BY r.{col} {way}, r.seq {way}"
        " LIMIT ? OFFSET ?",
        (key, *args, limit, offset),
    )
    rows: list[tuple[JobRecord, MetricResult | None]] = [_split(store, r) for r in found]
    ranked: int | None = None  # counted only when a page reaches past the ranked jobs
    if len(rows) < limit:
        ranked = offset + len(rows) if rows or not offset else None
        if ranked is None:
            ranked = int(store.read(count_ranked, (key, *([] if where.empty else args)))[0][0])
        found = store.read(
            f"SELECT {cols}, {rcols} FROM jobs j LEFT JOIN results r"
            f" ON r.job_id = j.job_id AND r.key=? WHERE {cond}"
            f" AND (r.{col} IS NULL) ORDER BY j.seq DESC LIMIT ? OFFSET ?",
            (key, *args, limit - len(rows), max(0, offset - ranked)),
        )
        rows += [_split(store, r) for r in found]
    end = offset + len(rows)
    return Board(rows, ranked, int(total), end if end < total and rows else None)


# --- helpers -----------------------------------------------------------------------------------


def _job_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in JOB_COLUMNS.split(", "))


def _split(store: Database, row: Sequence[Any]) -> tuple[JobRecord, MetricResult | None]:
    n = len(JOB_FIELDS)
    record = record_in_home(row[:n], store.home)
    rest = row[n:]
    return record, (None if rest[0] is None else _result(rest))


def _result(r: Sequence[Any]) -> MetricResult:
    key, final, final_step, finite, low, low_step, high, high_step, points = r
    if final is None:
        final = math.nan  # sqlite keeps a NaN as NULL
    return MetricResult(
        key, float(final), int(final_step), int(points), low, low_step, high, high_step
    )


def _stored(value: float) -> float | None:
    return None if math.isnan(value) else value


def _json_path(*parts: str) -> str:
    return "$" + "".join("." + json.dumps(p) for p in parts)


def _sql_value(value: Any) -> Any:
    """A config value as json_extract gives it back: booleans as 1/0, lists and dicts as
    their JSON text, None as NULL."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return value
