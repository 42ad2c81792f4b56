"""The idle supervisor: with no job to run, a supervisor waits a while for a pass to give it one."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.gpu.providers import provider
from air_skills.runtime.execution import sandbox_ahead
from air_skills.runtime.process import proc, signals
from air_skills.runtime.scheduling import pass_queries
from air_skills.runtime.scheduling.passes import (
    act_on_pass,
    cpu_slots,
    gpu_indices,
    run_pass,
    schedulable_gpus,
)
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store

# With no job to run, a supervisor waits this long for a pass to hand it one (no process to
# create then: the job starts at once); 0 to exit at once.
LINGER_S = settings.get("AIR_SUPERVISOR_LINGER_S")
# An idle supervisor without MLflow loads it after waiting this long for a job, when no other
# idle one has it: a tracked job handed to one without it waits seconds for its run (and a
# sandboxed job's metrics for their relay), while a quick stream of untracked jobs is left be.
PRELOAD_AFTER_S = 5.0
# An idle supervisor makes its next job's sandbox (sandbox_ahead.py) once it has waited this
# long: bwrap's start is then off that job's launch, and never beside a launch in flight.
AHEAD_AFTER_S = 0.1
# An idle supervisor runs a scheduling pass this often while jobs are queued.
PASS_EVERY_S = 10.0


def wait_for_job(
    store: Store, linger_s: float = LINGER_S, after: Iterable[Any] = ()
) -> JobRecord | None:
    """Wait, as an idle supervisor, for a pass to give this process a job; its row, or None.

    ``after``: this process's MLflow work (job_run.RunWork) still running. It is idle only
    once that is done: a job handed over meanwhile would start behind that thread, waiting
    for the GIL; a pass gives it to another idle supervisor, or starts one.
    """
    if linger_s <= 0 or not signals.wakeup_installed():
        return None
    for work in after:
        work.join(30)
    me = os.getpid()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signals.POKE_SIGNAL, lambda *_: None)  # wakes the wait below
    try:  # import what the preflight needs now, not while a job waits for it
        provider().faults([])
    except Exception:
        pass
    # Collect now and set what is left aside: a collection of the whole heap would otherwise
    # fall, sooner or later, between a job handed over and its start (milliseconds).
    gc.collect()
    gc.freeze()
    # As many wait as could be handed a job at once; more would only hold memory.
    limit = len(gpu_indices()) + cpu_slots()
    if not store.add_idle(me, proc.own_start(), limit, tracking_loaded()):
        return None
    deadline = time.monotonic() + linger_s
    preload = None if tracking_loaded() else time.monotonic() + PRELOAD_AFTER_S
    ahead: float | None = time.monotonic() + AHEAD_AFTER_S
    next_pass = time.monotonic() + PASS_EVERY_S
    while True:
        row = pass_queries.given_job(store.read, me, store.home)
        if row is not None:
            return row
        now = time.monotonic()
        if ahead is not None and now >= ahead and not stop.is_set():
            ahead = None
            sandbox_ahead.prepare()
            continue  # a job may have come meanwhile
        left = deadline - now
        wanted = (
            left > 0
            and not stop.is_set()
            and preload is not None
            and now >= preload
            and store.idle_tracking() == 0
        )
        if left <= 0 or stop.is_set() or wanted:
            if not store.remove_idle(me):
                # Off the list already: a pass took this process, its job committed with that.
                return pass_queries.given_job(store.read, me, store.home)
            if not wanted:
                return None
            # Off the list while MLflow loads (a job handed over meanwhile would wait for the
            # import), back on it with MLflow loaded: the next tracked job's relay is quick.
            preload = None
            load_tracking(store.home)
            gc.collect()
            gc.freeze()
            if not store.add_idle(me, proc.own_start(), limit, tracking_loaded()):
                return None
            continue
        if preload is not None and now >= preload:  # another idle one has it: ask again later
            preload = now + PRELOAD_AFTER_S
        if now >= next_pass:  # the timer's pass: no queued job waits for the next event
            next_pass = now + PASS_EVERY_S
            timer_pass(store)
            continue  # it may have handed this process a job
        wake = min(t for t in (deadline, preload, ahead, next_pass) if t is not None)
        signals.wait_readable([], max(0.0, wake - now))


def timer_pass(store: Store) -> None:
    """A scheduling pass when jobs are queued (issue 38.7): a job never waits for a launch or
    an exit to start on a GPU that freed or came back another way. Never raises."""
    try:
        if not store.read("SELECT 1 FROM jobs WHERE status = 'QUEUED' LIMIT 1", ()):
            return
        gpus = schedulable_gpus(store)
        with store.tx() as c:
            result = run_pass(store, c, gpus, None)
        act_on_pass(store, result)
    except Exception:
        pass  # the next event's pass, or the next timer's, tries again


def tracking_loaded() -> bool:
    """Whether this process has MLflow loaded (a job's run, or load_tracking, imported it),
    or has no need of it: the home's tracking writer does its MLflow writes."""
    from air_skills.tracking.writer import enabled

    return enabled() or "mlflow.tracking" in sys.modules


def load_tracking(home: Path) -> None:
    """Load MLflow and open the home's store before waiting (a supervisor started ahead, or
    one idle a while): its next job's run (job_run) and metric relay would otherwise wait
    seconds for them."""
    try:
        from air_skills.tracking.writer import enabled, ensure_writer

        if enabled():  # MLflow stays out of this process: the home's writer is started
            ensure_writer(home)
            return
        from air_skills.tracking.mlflow import MlflowTracker, tracking_uri

        _ = MlflowTracker(home, tracking_uri(home)).client
    except Exception:  # tracking down or broken: the job's own steps say so, as without this
        pass
