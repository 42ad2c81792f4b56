"""The idle supervisor: with no job to run, a supervisor waits a while for a pass to give it one."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.gpu.providers import provider
from air_skills.runtime.process import proc, signals
from air_skills.runtime.scheduling import pass_queries
from air_skills.runtime.scheduling.passes import cpu_slots, gpu_indices
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store

# With no job to run, a supervisor waits this long for a pass to hand it one (no process to
# create then: the job starts at once); 0 to exit at once.
LINGER_S = settings.get("AIR_SUPERVISOR_LINGER_S")


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
    if not store.add_idle(me, proc.own_start(), len(gpu_indices()) + cpu_slots()):
        return None
    deadline = time.monotonic() + linger_s
    while True:
        row = pass_queries.given_job(store.read, me, store.home)
        if row is not None:
            return row
        left = deadline - time.monotonic()
        if left <= 0 or stop.is_set():
            if store.remove_idle(me):
                return None
            # Off the list already: a pass took this process, its job committed with that.
            return pass_queries.given_job(store.read, me, store.home)
        signals.wait_readable([], left)


def load_tracking(home: Path) -> None:
    """Load MLflow and open the home's store before waiting as a supervisor started ahead:
    its first job's run (job_run) and metric relay would otherwise wait seconds for them."""
    try:
        from air_skills.tracking.mlflow import MlflowTracker, tracking_uri

        _ = MlflowTracker(home, tracking_uri(home)).client
    except Exception:  # tracking down or broken: the job's own steps say so, as without this
        pass
