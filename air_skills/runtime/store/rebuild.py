"""Rebuilding lost job records from the job folders, after the state database was lost."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from air_skills.home import FOLDER_RECORD, JOB_ID_RE
from air_skills.runtime.store.store import Store
from air_skills.status import JobStatus


def _folder_record(jdir: Path) -> dict[str, Any]:
    try:
        record = json.loads((jdir / FOLDER_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def rebuild_records(home: Path) -> list[str]:
    """Add a record for every job folder that has none; returns the job ids rebuilt.

    A rebuilt job is FAILED (infra): its outcome was in the lost database. Its spec, name,
    project and MLflow run come from the folder's record.json when it has one (jobs launched
    by this version), else only its id, folder and log are known.
    """
    store = Store(home, rebuilding=True)
    try:
        known = {r["job_id"] for r in store.read("SELECT job_id FROM jobs")}
        rebuilt: list[str] = []
        for name in sorted(os.listdir(home / "jobs")):
            if not JOB_ID_RE.match(name) or name in known:
                continue
            jdir = home / "jobs" / name
            record = _folder_record(jdir)
            spec = record.get("spec") or {"command": ["(unknown)"], "gpus": 0}
            spec = {**spec, "idempotency_key": None}  # a retried launch makes a new job
            with store.tx() as c:
                store.queue(
                    spec,
                    name,
                    str(record.get("log_path") or jdir / "output.log"),
                    str(record.get("name") or name),
                    record.get("run_id"),
                    record.get("experiment_id"),
                    message="QUEUED: record rebuilt from its folder",
                    c=c,
                    project=str(record.get("project") or "default"),
                )
                store.finish(
                    name,
                    JobStatus.FAILED,
                    message=(
                        "FAILED (infra): the state database lost this job's record; rebuilt"
                        " from its folder, its outcome is unknown."
                        f" Next: read `air logs {name}`, relaunch it if needed"
                    ),
                    failure_kind="infra",
                    c=c,
                )
            rebuilt.append(name)
        return rebuilt
    finally:
        store.close()
