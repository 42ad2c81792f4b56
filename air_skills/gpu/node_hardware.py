"""The hardware record of a cluster job (Ray, Slurm), made on the node that runs it.

A local job's supervisor writes ``hardware.json`` in the job's folder (runs/job_run.py). A
cluster job runs elsewhere: Slurm's runner, whose job folder is shared, writes the same file
from the node (``record``); a Ray node may not see the folder, so its entrypoint prints the
record as one log line (``python -m air_skills.gpu.node_hardware ray``), and the log sync
writes the file from that line (``settle_from_log``). Either way ``JobInfo.hardware`` and the
``air.hardware.*`` tags read the one file. Best effort: a record less never fails a job.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

MARKER = "[air] hardware "  # the log line's start, then the record as JSON
SCAN_BYTES = 256 * 1024  # the line is printed as the job starts: the log's head holds it


def on_node(backend: str, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """This node's record for a job given the GPUs in CUDA_VISIBLE_DEVICES (host, CPU model,
    GPU model and count where the node's driver, or the simulated provider, names them)."""
    from air_skills.gpu.hardware import describe

    env = os.environ if environ is None else environ
    ids = [x.strip() for x in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if x.strip()]
    indices = [int(x) for x in ids if x.isdigit()]
    info = describe(indices, backend)
    if len(indices) != len(ids):  # GPU UUIDs: counted, not described
        info["gpu_count"] = len(ids)
        if not indices:
            info["class"] = None
    return info


def record(job_folder: Path, backend: str) -> None:
    """Write this node's record into the job's (shared) folder; nothing on any failure."""
    from air_skills.gpu.hardware import write_record

    try:
        write_record(Path(job_folder), on_node(backend))
    except Exception:  # a record less: the job itself is not affected
        pass


def from_log(log_path: str | Path) -> dict[str, Any] | None:
    """The record a node printed into the job's log (its first MARKER line), or None."""
    try:
        with open(log_path, "rb") as f:
            head = f.read(SCAN_BYTES)
    except OSError:
        return None
    start = head.find(MARKER.encode())
    if start < 0:
        return None
    end = head.find(b"\n", start)
    if end < 0:
        return None  # the line is not whole yet
    try:
        info = json.loads(head[start + len(MARKER) : end])
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def settle_from_log(log_path: str | None) -> None:
    """Write ``hardware.json`` beside the log from the node's line, once (Ray)."""
    from air_skills.gpu.hardware import HARDWARE_FILE, write_record

    if not log_path or (Path(log_path).parent / HARDWARE_FILE).exists():
        return
    info = from_log(log_path)
    if info is not None:
        try:
            write_record(Path(log_path).parent, info)
        except OSError:
            pass


def mlflow_tag(tracker: Any, run_id: str | None, log_path: str | None) -> None:
    """Tag the job's MLflow run with ``air.hardware.*`` from its record (a cluster job's run is
    made here, not by a supervisor that tags it as the job starts)."""
    from air_skills.gpu.hardware import mlflow_tags, read_record

    info = read_record(log_path)
    if not info or not run_id:
        return
    try:
        from mlflow.entities import RunTag

        tags = [RunTag(k, v) for k, v in mlflow_tags(info).items()]
        tracker.client.log_batch(run_id, tags=tags)
    except Exception:  # a tag less: the run is still ended
        pass


if __name__ == "__main__":  # on a Ray node, as the job starts: the line for the log
    try:
        line = MARKER + json.dumps(on_node(sys.argv[1] if len(sys.argv) > 1 else "ray"))
        print(line, flush=True)
    except Exception:
        pass
