"""A home the nodes cannot read: each job runs from a folder on the shared storage, and its
output is fetched back into the job's folder (so ``air logs`` pages and greps it as usual).

When ``AIR_SLURM_SHARED_DIR`` is set and ``AIR_HOME`` is not under it, submission copies what
the node needs into ``$AIR_SLURM_SHARED_DIR/air-jobs/<job id>/`` (the launch file with its
paths moved there, ``config.json``, the job's code view as ``code/``); the runner writes the
log, checkpoints and ``slurm-exit.json`` there. Each reconcile and each ``air logs`` appends
the log's new bytes to the job's own log and copies the exit record back.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.backends.slurm.runner import EXIT_FILE
from air_skills.home import MAX_JOB_FILE_BYTES, read_job_json
from air_skills.job_folder import JobFolder

LOG = "output.log"
CHUNK = 1 << 20


def stage_dir(home: Path, job_id: str) -> Path | None:
    """Where the job runs on the shared storage; None when the nodes read the home itself."""
    shared = settings.get("AIR_SLURM_SHARED_DIR")
    if not shared or str(home).startswith(str(shared).rstrip("/") + "/"):
        return None
    return Path(shared) / "air-jobs" / job_id


def stage(jdir: Path, sdir: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Copy what the node reads into ``sdir``; the launch record with its paths moved there."""
    # Both folders are the job's to write (a retry finds what its last attempt left): files
    # are read and written by descriptor, never through a link (air_skills/job_folder.py).
    sdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with JobFolder.open(jdir) as src, JobFolder.open(sdir) as dst:
        try:
            dst.write("config.json", src.read("config.json", MAX_JOB_FILE_BYTES))
        except OSError:
            dst.remove("config.json")  # none (or not a regular file): none staged either
        dst.remove("code")  # copied whole below: nothing the last attempt left is written into
    try:  # a snapshot job's code view lives in the home: copy it whole
        code = read_job_json(jdir / "code.json")
    except (FileNotFoundError, ValueError):
        code = None
    if isinstance(code, dict) and code.get("view"):
        shutil.copytree(code["view"], sdir / "code", symlinks=True, dirs_exist_ok=True)
        record = {**record, "cwd": os.fspath(sdir / "code" / (code.get("cwd") or ""))}
    env = {
        k: (os.fspath(sdir) + v[len(str(jdir)) :] if v.startswith(str(jdir)) else v)
        for k, v in record["env"].items()
    }
    return {**record, "env": env, "log_path": os.fspath(sdir / LOG)}


def fetch(jdir: Path, sdir: Path) -> None:
    """Append the staged log's new bytes to the job's log; copy the exit record back."""
    # Both folders are the job's to write: opened by descriptor, no link followed (a link at
    # the staged log would copy a host file into the job's log; one at the job's log or exit
    # record would write through it).
    try:
        with JobFolder.open(sdir) as staged, JobFolder.open(jdir) as home:
            fin = os.fdopen(staged.open_read(LOG), "rb")
            with fin, os.fdopen(home.open_append(LOG), "ab") as fout:
                fin.seek(os.fstat(fout.fileno()).st_size)
                while chunk := fin.read(CHUNK):
                    fout.write(chunk)
            try:
                ended = staged.read(EXIT_FILE, 4096)
            except OSError:
                return
            home.write(EXIT_FILE, ended)
    except OSError:
        return
