"""Ray's log of a job's current attempt, appended to the job's log file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from air_skills.backends.ray.refs import job_lock, split_ref
from air_skills.backends.ray.sdk import DEFAULT_ADDRESS, call, connect, env_address
from air_skills.errors import BackendUnavailable
from air_skills.gpu.node_hardware import settle_from_log
from air_skills.job_folder import JobFolder
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus

PREVIOUS = "ray-previous.log"  # the job's output before Ray's current attempt (reconcile.py)


def sync_logs(row: JobRecord, ray: Any = None, final: bool = False) -> None:
    """Bring the job's log file up to date with Ray's log of the current attempt.

    The file is only ever appended to (earlier attempts are kept before it), so byte
    offsets that readers hold stay valid.
    """
    log = Path(row.log_path)
    if (log.parent / "ray-logs.done").exists():
        return
    sid, address = split_ref(row.backend_ref)
    if sid is None:
        return
    live = not JobStatus(row.status).is_terminal()
    try:
        if ray is None:
            ray = connect(env_address() or address or DEFAULT_ADDRESS)
            if ray.get_address().rstrip("/") != (address or "").rstrip("/"):
                return
        text = call(ray, "get_job_logs", sid)
    except BackendUnavailable:
        if live and not final:
            raise
        return
    except Exception:
        return  # gone from Ray: what we kept is all there is
    # The job's folder may hold links the job made: every file is opened by descriptor, none
    # followed (air_skills/job_folder.py).
    with JobFolder.open(log.parent) as folder:
        try:
            with os.fdopen(folder.open_read(PREVIOUS), "rb") as f:
                prev = f.read()
        except FileNotFoundError:
            prev = b""
        want = prev + (text or "").encode("utf-8", "replace")
        with job_lock(log.parent, name="log.lock"):
            with os.fdopen(folder.open_append(log.name), "ab") as f:
                size = os.fstat(f.fileno()).st_size
                if len(want) > size:
                    f.write(want[size:])
            if len(want) < size and not prev:
                folder.write(log.name, want)
        settle_from_log(row.log_path)  # the node's hardware line, as hardware.json
        if not live:
            folder.touch("ray-logs.done")
