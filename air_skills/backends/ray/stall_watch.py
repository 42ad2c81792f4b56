"""Stall detection for Ray jobs: the local supervisor's watch (runtime/supervision/stall.py) on
reconcile's tick, its clock kept in the job's folder from one reconcile to the next.

A Ray job has no supervisor of ours: its record is reconciled on each client call (a wait, a
list, a study's loop). There the watch reads the same signals as for a local job: the job's
log (fetched from Ray when a look is due, at most every few seconds), new steps of its MLflow
metrics, and its phase files (on a head on this machine, the job's folder is this one). The
stacks are those of the job's processes this machine can see (by AIR_JOB_ID); on another node
the stall is told without them. What the stall does (``on_stall``) is applied by reconcile.
"""

from __future__ import annotations

import json
import time
from typing import Any

from air_skills.backends.ray.logs import sync_logs
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.process import proc
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.supervision import stacks, stall, stall_end

STATE = "stall-watch.json"  # in the job's folder: the watch of the current attempt


def look(rt: LaunchContext, ray: Any, row: JobRecord, spec: dict[str, Any]) -> stall.Stall | None:
    """The running Ray job's turn: a Stall when it is to be stopped (``on_stall`` fail or
    retry); under notify its message says so and it runs on (stall.tick)."""
    if not row.started_at or row.stop_request:
        return None
    jdir = rt.job_dir(row.job_id)
    watch = stall.watch(rt.home, jdir, row, spec, [], now=row.started_at)
    if watch is None:
        return None
    saved = _read(jdir)
    if saved.get("attempt") == row.attempts:
        watch.restore(saved)
    now = time.time()  # the watch's clock is wall time here: it spans processes
    if now < watch.next_check:
        return None
    try:
        sync_logs(row, ray=ray)  # the log grows here only when fetched from Ray
    except Exception:  # an unreachable log is no progress, and no stall either
        return None
    found = stall.tick(watch, rt.store, row, spec, now, lambda: proc.job_processes(row.job_id))
    stacks.write_new(jdir / STATE, json.dumps({**watch.state(), "attempt": row.attempts}))
    if found is not None:
        watch.finish(now)
        stall_end.attach(rt.home, jdir, row, found)
    return found


def _read(jdir: Any) -> dict[str, Any]:
    try:
        data = json.loads(stacks.read_small(jdir / STATE, 1 << 16) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
