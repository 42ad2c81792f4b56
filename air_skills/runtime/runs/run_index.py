"""Filling the results index (runtime/store/results_index.py) from MLflow, the record.

``index_end`` is called on every path that ends a job's MLflow run (the supervisor's end, a
job settled without its supervisor, a cluster job's settle), after the run's last values are
logged; ``catch_up`` brings the index up to date before a read (running jobs, and ended jobs
whose end was cut short by a kill or predate the index). Neither imports MLflow on a sqlite
store: the points are read with sqlite3 (tracking/run_points.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from air_skills.home import job_dir
from air_skills.runtime.store import results_index
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store
from air_skills.status import JobStatus


def index_end(store: Store, job_id: str, run_id: str | None, uri: str | None = None) -> bool:
    """Write the final rows of a job whose run has ended; False if MLflow could not be read
    (a later read catches up: the job stays due)."""
    if not run_id:
        return False
    from air_skills.tracking.run_points import run_points

    uri = uri or _uri(store, job_id)
    found = run_points(store.home, uri, [run_id])
    if found is None:
        return False
    results = results_index.summarize_run(found.get(run_id, {}))
    return results_index.write(store, job_id, results, final=True)


def catch_up(store: Store, job_ids: Sequence[str] | None = None) -> int:
    """Index the due jobs (all, or those of ``job_ids``): an ended job's rows become final, a
    running one's are its metrics so far. Returns how many jobs were written."""
    rows = results_index.due(store, job_ids)
    if not rows:
        return 0
    return index_rows(store, rows)


def index_rows(store: Store, rows: Sequence[JobRecord]) -> int:
    """Read the runs of ``rows`` from MLflow (one query per tracking store) and write their
    rows: final for ended jobs, live for the others."""
    from air_skills.tracking.run_points import run_points

    by_uri: dict[str, list[JobRecord]] = defaultdict(list)
    for row in rows:
        if row.run_id:
            by_uri[_uri(store, row.job_id)].append(row)
    written = 0
    for uri, group in by_uri.items():
        for i in range(0, len(group), 2000):
            chunk = group[i : i + 2000]
            found = run_points(store.home, uri, [r.run_id for r in chunk if r.run_id])
            if found is None:
                continue  # that store cannot be read now: its jobs stay due
            with store.tx() as c:
                for row in chunk:
                    results = results_index.summarize_run(found.get(str(row.run_id), {}))
                    final = JobStatus(row.status).is_terminal()
                    written += results_index.write(store, row.job_id, results, final=final, c=c)
    return written


def _uri(store: Store, job_id: str) -> str:
    from air_skills.runtime.runs.job_run import job_uri

    return job_uri(store.home, job_dir(store.home, job_id))
