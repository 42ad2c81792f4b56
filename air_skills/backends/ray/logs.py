"""Ray's log of a job's current attempt, appended to the job's log file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from air_skills.backends.ray.refs import job_lock, split_ref
from air_skills.backends.ray.sdk import DEFAULT_ADDRESS, call, connect, env_address
from air_skills.errors import BackendUnavailable
from air_skills.gpu.node_hardware import settle_from_log
from air_skills.runtime.store.records import JobRecord
from air_skills.status import JobStatus


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
    prev_path = log.parent / "ray-previous.log"
    prev = prev_path.read_bytes() if prev_path.exists() else b""
    want = prev + (text or "").encode("utf-8", "replace")
    with job_lock(log.parent, name="log.lock"):
        size = log.stat().st_size if log.exists() else 0
        if len(want) > size:
            with open(log, "ab") as f:
                f.write(want[size:])
        elif len(want) < size and not prev:
            tmp = log.with_suffix(".tmp")
            tmp.write_bytes(want)
            tmp.replace(log)
    settle_from_log(row.log_path)  # the node's hardware line, as hardware.json
    if not live:
        (log.parent / "ray-logs.done").touch()
