"""Learned run-time estimates: a job's expected duration from its class's past successes.

Agents rarely set ``timeout_min``, but they launch many jobs of the same kind (a study's
trials, a sweep). A job's **class** is a hash of what decides its run time apart from its
config: the command, the working directory, the experiment, the study tag and the GPU count.
A job without a time limit is expected to run as long as the median of its class's last
``RECENT`` SUCCEEDED attempts, times ``SAFETY`` (``SAFETY_ONE`` while there is only one). A
class without any success yet (the cold start) gets a prior: the median of the estimates of
the other classes that the same pass reads, times ``PRIOR_SAFETY`` (``with_prior``); one GPU
job without any estimate would leave every start time unknown, and no backfill at all.

The scheduler uses an estimate for backfill as it uses a time limit, with one difference: an
estimate is a guess (nothing stops the job when it is passed), so while a running job is past
its guessed end, no job with only a guess overtakes a blocked job that has waited past its
age limit (``AIR_STARVATION_S``): an overrun delays that job by at most the overruns of the
guessed jobs already running, never by a stream of later ones (runtime/scheduling/scheduler.py).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MIN_SAMPLES = 1  # successes needed for a class's own estimate (bench/packing.py: 1 beats 3)
SAFETY = 1.25  # the median times this: run-to-run noise should rarely pass it
SAFETY_ONE = 1.5  # a single success says less: a wider margin
PRIOR_SAFETY = 2.0  # a class with no success yet: other classes' median estimate times this
RECENT = 20  # the class's latest successes that count (the code changes; old runs say less)
STUDY_TAG = "autoresearch.study.study"
_CHUNK = 100  # classes per statement: SQLite caps a compound SELECT at 500 terms


def job_class(spec: Mapping[str, Any]) -> str:
    """The class of a job spec (JSON data): equal for jobs expected to run about as long."""
    key = [
        spec.get("command"),
        spec.get("workdir"),
        spec.get("experiment"),
        (spec.get("tags") or {}).get(STUDY_TAG),
        spec.get("gpus", 0),
        spec.get("procs"),
        spec.get("nodes", 1),
    ]
    text = json.dumps(key, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def estimate(durations: Sequence[float]) -> float | None:
    """The expected run time in seconds from past durations; None with too few of them."""
    if len(durations) < MIN_SAMPLES:
        return None
    return statistics.median(durations) * (SAFETY_ONE if len(durations) == 1 else SAFETY)


def with_prior(known: Mapping[str, float], classes: Iterable[str]) -> dict[str, float]:
    """``known`` estimates, plus a prior for each of ``classes`` without one: the median of
    the known estimates times ``PRIOR_SAFETY`` (none when nothing is known: a fresh home).

    The prior comes from the classes that the pass reads anyway (the head of the queue and
    the running jobs), so it costs no query; bench/packing.py measured it as good as one
    from every class of the home.
    """
    out = dict(known)
    if not known:
        return out
    prior = statistics.median(known.values()) * PRIOR_SAFETY
    for k in classes:
        if k and k not in out:
            out[k] = prior
    return out


def class_estimates(c: sqlite3.Connection, classes: Iterable[str]) -> dict[str, float]:
    """{class: estimate} for the given classes that have one.

    One statement: per class, an index range read (``jobs_class_done``) of its ``RECENT``
    latest successes, so the cost does not grow with the history's length.
    """
    wanted = sorted({k for k in classes if k})
    if not wanted:
        return {}
    part = (
        "SELECT * FROM (SELECT job_class, ended_at - started_at AS d FROM jobs"
        " INDEXED BY jobs_class_done WHERE job_class=? AND status='SUCCEEDED'"
        f" ORDER BY ended_at DESC LIMIT {RECENT})"
    )
    durations: dict[str, list[float]] = {}
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i : i + _CHUNK]
        for row in c.execute(" UNION ALL ".join([part] * len(chunk)), chunk):
            if row[1] is not None and row[1] >= 0:
                durations.setdefault(row[0], []).append(row[1])
    out = {}
    for k, ds in durations.items():
        est = estimate(ds)
        if est is not None:
            out[k] = est
    return out
