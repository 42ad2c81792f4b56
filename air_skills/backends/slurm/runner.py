"""What a Slurm batch job runs: ``python -m air_skills.backends.slurm.runner JOB_DIR``.

Stdlib only. It starts the job's command exactly as a local supervisor would (argv, folder and
environment prepared at submission in ``slurm-launch.json``, owner-only), with the GPUs Slurm
gave it, its output appended to the job's log; it forwards Slurm's signals and, when the
command ends, writes ``slurm-exit.json`` (exit code or signal) so the job can be settled from
its files even after Slurm has forgotten it (MinJobAge).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LAUNCH_FILE = "slurm-launch.json"
EXIT_FILE = "slurm-exit.json"
# Variables Slurm sets on the node that the job keeps (its GPUs, its allocation).
FROM_SLURM = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_JOB_GPUS", "SLURM_JOB_NODELIST")


def _read_launch(jdir: Path) -> dict[str, Any]:
    fd = os.open(jdir / LAUNCH_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return json.loads(f.read(16 * 2**20))


def _write_exit(jdir: Path, record: dict[str, Any]) -> None:
    tmp = jdir / f".{EXIT_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, jdir / EXIT_FILE)


def run(jdir: Path) -> int:
    launch = _read_launch(jdir)
    env = dict(launch["env"])
    env.update({k: os.environ[k] for k in FROM_SLURM if k in os.environ})
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    slurm_id = os.environ.get("SLURM_JOB_ID", "")
    (jdir / "checkpoints").mkdir(exist_ok=True)
    config = launch.get("config")
    if config is not None and not (jdir / "config.json").exists():
        (jdir / "config.json").write_text(json.dumps(config))
    with open(launch["log_path"], "ab") as log:
        log.write(f"[air] Slurm job {slurm_id} on {os.uname().nodename}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            launch["argv"],
            cwd=launch.get("cwd"),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            close_fds=True,
        )

    def forward(signum: int, _frame: object) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    code = proc.wait()
    record: dict[str, Any] = {"slurm_id": slurm_id, "ended_at": time.time()}
    if code < 0:
        record["signal"] = signal.Signals(-code).name
        record["exit_code"] = None
    else:
        record["exit_code"] = code
    _write_exit(jdir, record)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
