"""No experiment twice: a job's run key (what runs: spec, code digest, config) and the check.

``run_key`` hashes what decides a job's result: command, workdir, config (seed included),
the code snapshot's digest, patch, image, GPUs, processes, nodes, data digests, env names and
backend. Labels (name, tags, experiment, priority, project, launched_by, idempotency key) are
not in it: two agents that name the same experiment differently still run one experiment.
``near_key`` is the same hash with every numeric config value left out: jobs that share it
differ only in numbers, and ``nearest`` finds the closest one within a relative distance.
Both are stored in indexed columns (``Store.queue``), so a check is one index look-up.
Stdlib only: the runtime is pydantic-free.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from air_skills.errors import InvalidState

# Spec fields that decide what runs; the rest are labels or scheduling.
RUN_FIELDS = ("command", "workdir", "gpus", "procs", "nodes", "backend", "code", "patch")
# A job in one of these is the experiment done or on its way; a failed or cancelled one is not.
ALIVE_OR_DONE = ("QUEUED", "RUNNING", "SUCCEEDED")
NEAR_CANDIDATES = 200  # jobs differing only in numbers that a near check compares, newest first
_NUMBER = "#"


def _what_runs(spec: Mapping[str, Any], code_digest: str | None) -> dict[str, Any]:
    out = {k: spec.get(k) for k in RUN_FIELDS}
    out["image"] = spec.get("image_digest") or spec.get("image")
    out["env"] = sorted(spec.get("env") or {})
    out["data"] = sorted(
        (d.get("name"), d.get("digest") or d.get("path")) for d in spec.get("data") or []
    )
    out["code_digest"] = code_digest
    return out


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _without_numbers(config: Any) -> Any:
    if isinstance(config, dict):
        return {k: _without_numbers(v) for k, v in config.items()}
    if isinstance(config, list):
        return [_without_numbers(v) for v in config]
    return _NUMBER if _is_number(config) else config


def keys(spec: Mapping[str, Any], code_digest: str | None) -> tuple[str, str]:
    """(run_key, near_key) of a spec (JSON data) run on the code with ``code_digest``."""
    what = _what_runs(spec, code_digest)
    config = spec.get("config") or {}
    return _hash({**what, "config": config}), _hash({**what, "config": _without_numbers(config)})


def same_run(c: sqlite3.Connection, run_key: str) -> tuple[str, str, str | None] | None:
    """(job_id, status, launched_by) of the newest queued, running or succeeded job with
    this run key; None when there is none."""
    marks = ",".join("?" * len(ALIVE_OR_DONE))
    row = c.execute(
        f"SELECT job_id, status, launched_by FROM jobs WHERE run_key=? AND status IN ({marks})"
        " ORDER BY seq DESC LIMIT 1",
        (run_key, *ALIVE_OR_DONE),
    ).fetchone()
    return (row[0], row[1], row[2]) if row else None


def refuse_duplicate(c: sqlite3.Connection, run_key: str) -> None:
    """Raise ``duplicate`` naming the job that already runs (or ran) this experiment."""
    found = same_run(c, run_key)
    if found is None:
        return
    job_id, status, who = found
    raise InvalidState(
        f"the same experiment (spec, code and config, seed included) is {job_id}"
        f" ({status}, launched by {who or 'the local user'}): not queued again",
        code="duplicate",
        hint=f"read its result (get_job {job_id}, with a metric), change the config (another"
        " seed is another experiment), or pass allow_duplicate to run it again",
        job_id=job_id,
        status=status,
        launched_by=who,
    )


def _numbers(config: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(config, dict):
        for k, v in config.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(config, list):
        for i, v in enumerate(config):
            yield from _numbers(v, f"{path}[{i}]")
    elif _is_number(config):
        yield path, float(config)


def distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """The largest relative difference between two configs' numbers (same keys assumed)."""
    return _distance(dict(_numbers(a)), dict(_numbers(b)))


def _distance(na: Mapping[str, float], nb: Mapping[str, float], stop: float = math.inf) -> float:
    """The largest relative difference; once it is over ``stop`` (a candidate that cannot be
    within the limit), that far (a sweep's item is compared with up to NEAR_CANDIDATES)."""
    worst = 0.0
    for k, x in na.items():
        y = nb.get(k, x)
        if x == y:
            continue
        ax, ay = abs(x), abs(y)
        d = abs(x - y) / (ax if ax > ay else ay)
        if d > worst:
            worst = d
            if worst > stop:
                break
    return worst


# {job_id: its config's numbers}: a job's recorded config never changes, so a launcher reads
# each candidate's once (a sweep of 1,000 compares each new item with up to NEAR_CANDIDATES
# siblings: 200,000 configs parsed without it, 1,000 with it).
_NUMBERS_SEEN: dict[str, dict[str, float]] = {}
_NUMBERS_KEPT = 20_000


def nearest(
    c: sqlite3.Connection,
    near_key: str,
    config: Mapping[str, Any],
    within: float,
    exclude: str | None = None,
) -> tuple[str, float, str] | None:
    """(job_id, distance, status) of the closest queued, running or succeeded job that
    differs from ``config`` only in numbers, each within ``within`` (relative); else None."""
    return closest(candidates(c, near_key, exclude), config, within)


Candidate = tuple[str, str, dict[str, float]]  # (job_id, status, its config's numbers)


def candidates(
    c: sqlite3.Connection, near_key: str, exclude: str | None, limit: int = NEAR_CANDIDATES
) -> list[Candidate]:
    """The newest ``limit`` queued, running or succeeded jobs with ``near_key``."""
    marks = ",".join("?" * len(ALIVE_OR_DONE))
    rows = c.execute(
        f"SELECT job_id, status FROM jobs WHERE near_key=?"
        f" AND status IN ({marks}) AND job_id != ? ORDER BY seq DESC LIMIT ?",
        (near_key, *ALIVE_OR_DONE, exclude or "", limit),
    ).fetchall()
    unseen = [job_id for job_id, _ in rows if job_id not in _NUMBERS_SEEN]
    if len(_NUMBERS_SEEN) + len(unseen) > _NUMBERS_KEPT:
        _NUMBERS_SEEN.clear()
        unseen = [job_id for job_id, _ in rows]
    if unseen:
        found = c.execute(
            f"SELECT job_id, json_extract(spec, '$.config') FROM jobs"
            f" WHERE job_id IN ({','.join('?' * len(unseen))})",
            unseen,
        ).fetchall()
        for job_id, text in found:
            _NUMBERS_SEEN[job_id] = numbers(json.loads(text) if text else {})
    # one gone since (a gc) has nothing to compare
    return [(j, st, _NUMBERS_SEEN[j]) for j, st in rows if j in _NUMBERS_SEEN]


def numbers(config: Any) -> dict[str, float]:
    """{dotted path: value} of a config's numbers."""
    return dict(_numbers(config))


def closest(
    found: Iterable[Candidate], config: Mapping[str, Any], within: float
) -> tuple[str, float, str] | None:
    """(job_id, distance, status) of the closest of ``found`` within ``within``; else None."""
    mine = numbers(config)
    best: tuple[str, float, str] | None = None
    for job_id, status, theirs in found:
        d = _distance(mine, theirs, within)
        if d <= within and (best is None or d < best[1]):
            best = (job_id, d, status)
    return best


def backfill(c: sqlite3.Connection) -> int:
    """Give the jobs of a home older than the run keys theirs (from their stored spec and
    code digest), so a new launch is checked against them too; returns how many."""
    rows = c.execute("SELECT job_id, spec, code FROM jobs WHERE run_key IS NULL").fetchall()
    updates = []
    for job_id, spec, code in rows:
        try:
            digest = (json.loads(code) or {}).get("digest") if code else None
            run_key, near_key = keys(json.loads(spec), digest)
        except (ValueError, TypeError, AttributeError):
            continue  # an unreadable record keeps no key: it is never called a duplicate
        updates.append((run_key, near_key, job_id))
    c.executemany("UPDATE jobs SET run_key=?, near_key=? WHERE job_id=?", updates)
    return len(updates)
