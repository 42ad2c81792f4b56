"""Spare MLflow runs: made ahead where MLflow is loaded, claimed by a launch without MLflow.

Importing MLflow and creating a run costs a launching process seconds (issue 17). So
processes that have MLflow loaded anyway (a job's supervisor, while its job runs and while it
lingers; a long-lived launcher that keeps spares) make a few RUNNING runs per (tracking URI,
experiment) ahead of time, tagged ``air.spare=1``, and record them in air.db. A launch checks
them (tracking/run_state.py: still RUNNING, neither run nor experiment deleted) and claims one
in its queue transaction, pure SQLite: the job starts with MLFLOW_RUN_ID at once, and its
supervisor gives the run its name, params, tags and data inputs (runtime/runs/job_run.py).

Only pools that a launch asked for are kept filled (``want_spares``, renewed by each launch
that uses them, dropped after WANT_FOR_S without one): a home launched from the Python API
alone, which creates its runs itself, never holds spares. Spares older than MAX_AGE_S are
deleted (a run's start time is its creation's); those of a deleted experiment are dropped.
A spare is SCHEDULED in MLflow, never RUNNING, until a job claims it; ``air gc`` ends and
deletes those that no live supervisor keeps (``sweep``).
"""

from __future__ import annotations

import fcntl
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from air_skills.runtime.process.proc import alive
from air_skills.runtime.store.store import Store
from air_skills.tracking.mlflow import DEFAULT_EXPERIMENT, MlflowTracker
from air_skills.tracking.run_state import checkable, usable_runs

PER_POOL = 4  # spares kept per (URI, experiment): a burst of this many launches finds one each
MAX_AGE_S = 24 * 3600.0  # an older spare is deleted: its run's start time would mislead
WANT_FOR_S = 7 * 24 * 3600.0  # a pool no launch used for this long is no longer filled


def experiment_name(experiment: str | None) -> str:
    return experiment or DEFAULT_EXPERIMENT


# --- the launch's half: pure SQLite (and a read of MLflow's sqlite tables) -------------------


def candidates(store: Store, uri: str, experiment: str | None) -> list[tuple[str, str]]:
    """Spare runs a launch may claim, checked usable, in random order (concurrent launches
    then rarely reach for the same one); unusable ones are forgotten."""
    if not checkable(uri):
        return []
    rows = store.spare_candidates(uri, experiment_name(experiment))
    if not rows:
        return []
    ids = {r["run_id"]: r["experiment_id"] for r in rows}
    usable = usable_runs(uri, list(ids))
    store.drop_spares([r for r in ids if r not in usable])
    out = [(r, ids[r]) for r in usable]
    random.shuffle(out)
    return out


def claim(
    store: Store, c: sqlite3.Connection, found: list[tuple[str, str]]
) -> tuple[str, str] | None:
    """Claim the first of ``found`` that no other launch took, inside the queue transaction."""
    for run_id, experiment_id in found:
        if store.take_spare(c, run_id):
            return run_id, experiment_id
    return None


def give_back(
    store: Store, c: sqlite3.Connection, run: tuple[str, str], uri: str, experiment: str | None
) -> None:
    """Return a claimed spare (its job was not recorded: a concurrent launch won its key)."""
    store.put_spare(c, run[0], uri, experiment_name(experiment), run[1])


def want(store: Store, c: sqlite3.Connection, uri: str, experiment: str | None) -> None:
    """Ask, in the launch's transaction, for this pool to be kept filled."""
    if checkable(uri):
        store.want_spares(c, uri, experiment_name(experiment))


# --- the half where MLflow is loaded ---------------------------------------------------------


def top_up(store: Store, tracker: Any, *, only: str | None = None) -> int:
    """Fill the wanted pools of ``tracker``'s URI (or the one experiment ``only``) to PER_POOL,
    and delete expired spares. One process at a time per home (the others skip it: no
    overshoot). Returns how many spares it made. Tracking errors end it quietly."""
    lock = _try_lock(store.home)
    if lock is None:
        return 0
    made = 0
    try:
        _expire(store, tracker)
        since = time.time() - WANT_FOR_S
        pools = store.wanted_pools(tracker.uri, since)
        if only is not None:
            pools = [p for p in pools if p == only]
        for experiment in pools:
            made += _fill(store, tracker, experiment)
    except Exception:
        pass  # tracking down or busy: the launches fall back to making their runs
    finally:
        lock.close()
    return made


def _fill(store: Store, tracker: Any, experiment: str) -> int:
    have = store.spare_candidates(tracker.uri, experiment, limit=PER_POOL)
    usable = usable_runs(tracker.uri, [r["run_id"] for r in have])
    if len(usable) < len(have):  # a deleted run, or the whole experiment deleted
        store.drop_spares([r["run_id"] for r in have if r["run_id"] not in usable])
        if not usable and not _experiment_active(tracker, experiment):
            store.drop_pool(tracker.uri, experiment)  # its next launch makes it anew
            return 0
    made = 0
    for _ in range(PER_POOL - len(usable)):
        run_id, exp_id = tracker.create_spare(experiment)
        store.add_spare(run_id, tracker.uri, experiment, exp_id)
        made += 1
    return made


def _experiment_active(tracker: Any, name: str) -> bool:
    exp = tracker.client.get_experiment_by_name(name)
    return exp is not None and exp.lifecycle_stage == "active"


def _expire(store: Store, tracker: Any) -> None:
    """Delete this URI's spares older than MAX_AGE_S (their record first: never handed out);
    those of other URIs are left to processes that track there."""
    old = store.spares_made_before(time.time() - MAX_AGE_S)
    mine = [r["run_id"] for r in old if r["uri"] == tracker.uri]
    store.drop_spares(mine)
    for run_id in mine:
        try:
            tracker.delete_run(run_id)
        except Exception:
            pass  # deleted already: the record is gone all the same


def sweep(store: Store, dry_run: bool = False) -> dict[str, int]:
    """``air gc``'s part: when no supervisor of this home is alive (none keeps the pools), end
    every spare run (KILLED, then deleted: hidden in MLflow) and forget it. A spare that a
    launch claims meanwhile is left to its job. Tracking errors leave the rest as they are."""
    rows = store.all_spares()
    if any(alive(pid, None) for pid in store.supervisor_pids()):
        return {"spare_runs_ended": 0, "spare_runs_kept": len(rows)}
    ended = 0
    trackers: dict[str, MlflowTracker] = {}
    for row in rows:
        if dry_run:
            ended += 1
            continue
        if not store.forget_spare(row["run_id"]):
            continue  # a launch took it
        ended += 1
        try:
            tracker = trackers.setdefault(row["uri"], MlflowTracker(store.home, row["uri"]))
            tracker.client.set_terminated(row["run_id"], "KILLED")
            tracker.delete_run(row["run_id"])
        except Exception:
            pass  # its store is gone or down: the record is gone all the same
    return {"spare_runs_ended": ended, "spare_runs_kept": 0}


def _try_lock(home: Path) -> Any:
    f = open(home / "spares.lock", "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f
