"""What a launch says about the experiments already run: a duplicate's result, a near one.

The refusal itself happens in ``Store.queue``'s transaction (runtime/store/dedup.py); this
module adds what the caller needs next: the duplicate's status and metrics, and after a
launch, the closest job that differs only in numbers (a warning, not a refusal).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from air_skills.errors import AirError
from air_skills.runtime.store import dedup
from air_skills.runtime.store.store import Store

SHOWN_METRICS = 6  # metrics of a duplicate named in its message


def result_of(store: Store, tracker: Any, job_id: str) -> dict[str, Any]:
    """{status, metrics}: the job's status and its latest metric values (none when untracked
    or while tracking is down)."""
    row = store.row(job_id)
    if row is None:
        return {}
    metrics: dict[str, float] = {}
    if row.run_id:
        try:
            metrics = dict(tracker.latest(row.run_id))
        except Exception:  # tracking down or no run: the status still says where it stands
            metrics = {}
    return {"status": row.status, "metrics": metrics}


def explain(exc: AirError, store: Store, tracker: Any) -> None:
    """Add the duplicate's result (status, latest metrics) to a ``duplicate`` error."""
    job_id = exc.context.get("job_id")
    if not job_id:
        return
    result = result_of(store, tracker, str(job_id))
    exc.context["result"] = result
    metrics = result.get("metrics") or {}
    if metrics:
        shown = ", ".join(f"{k}={v:.6g}" for k, v in sorted(metrics.items())[:SHOWN_METRICS])
        exc.message += f"; its latest metrics: {shown}"
        exc.args = (exc.message,)


def near_note(store: Store, job_id: str, within: float) -> str | None:
    """A warning naming the closest queued, running or done job whose config differs from
    ``job_id``'s only in numbers, each within ``within`` (relative); None when there is none.
    Inside ``one_call``, the jobs before this one are those the call found plus the ones it
    launched (one read per kind of job, not one per launch)."""
    row = store.row(job_id)
    if row is None or row.near_key is None or within <= 0:
        return None
    config = json.loads(row.spec).get("config") or {}
    call = _CALL.get()
    if call is None:
        found = dedup.nearest(store.conn, row.near_key, config, within, exclude=job_id)
    else:
        before = call.before.get(row.near_key)
        if before is None:  # what was there before the call, newest first
            n = dedup.NEAR_CANDIDATES + len(call.own)
            found_then = dedup.candidates(store.conn, row.near_key, job_id, n)
            before = [f for f in found_then if f[0] not in call.own][: dedup.NEAR_CANDIDATES]
            call.before[row.near_key] = before
        found = dedup.closest(before[: dedup.NEAR_CANDIDATES], config, within)
        before.insert(0, (job_id, row.status, dedup.numbers(config)))
    if found is None:
        return None
    other, distance, status = found
    if distance == 0:
        return f"the same experiment as {other} ({status}), run again as asked"
    return (
        f"NEAR-DUPLICATE of {other} ({status}): every number in the config within"
        f" {distance:.1%} of it (AIR_DEDUP_NEAR={within:g}); read its result first"
    )


@dataclass
class _Call:
    """The launches of one call (``one_call``): per near key, the candidates newest first;
    the jobs the call queued (``queued``), never taken for jobs from before it."""

    before: dict[str, list[dedup.Candidate]] = field(default_factory=dict)
    own: set[str] = field(default_factory=set)


_CALL: ContextVar[_Call | None] = ContextVar("near_call", default=None)


@contextmanager
def one_call() -> Iterator[None]:
    """The launches of one call (a sweep of 1,000, a launch_jobs batch) checked for near
    duplicates together: the jobs that were there when the call began (their status as it
    was then) and the call's own launches so far, newest first, as each launch alone would
    see them; without it a sweep read up to NEAR_CANDIDATES jobs per item."""
    token = _CALL.set(_Call())
    try:
        yield
    finally:
        _CALL.reset(token)


def queued(job_ids: Iterable[str]) -> None:
    """Inside ``one_call``: these jobs are the call's own, queued together before their notes
    are asked (a group in one transaction); each is compared only with those before it."""
    call = _CALL.get()
    if call is not None:
        call.own.update(job_ids)


def precheck(store: Store, spec: Any, code_digest: str | None) -> None:
    """Refuse a duplicate before its folder and MLflow run are made (``Store.queue`` checks
    again, in its transaction, for launches that race)."""
    data = spec.model_dump(mode="json")
    if data.get("allow_duplicate") is False:
        dedup.refuse_duplicate(store.conn, dedup.keys(data, code_digest)[0])


def dry_run_note(store: Store, spec: Any, code_digest: str | None) -> str | None:
    """What a dry run says when the launch would be refused as a duplicate."""
    data = spec.model_dump(mode="json")
    if data.get("allow_duplicate") is not False:
        return None
    found = dedup.same_run(store.conn, dedup.keys(data, code_digest)[0])
    if found is None:
        return None
    job_id, status, who = found
    return (
        f"WOULD BE A DUPLICATE of {job_id} ({status}, launched by {who or 'the local user'}):"
        " read its result, or pass allow_duplicate"
    )
