"""One real Ray head for the whole Ray suite: 4 fake GPUs, 2 CPUs, dashboard on 127.0.0.1.

The head runs with Ray's token auth (as the docs tell users to), so the token is set for this
process before anything asks Ray whether auth is on (Ray caches that answer per process).
Ray gives up on a job that waits for resources after RAY_JOB_START_TIMEOUT_SECONDS (15
minutes by default); the head uses 20 s, so the resubmission path is exercised for real.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

RAY_TOKEN = secrets.token_hex(16)
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = RAY_TOKEN
START_TIMEOUT_S = 20

HOLD = """\
import os, sys, time
from pathlib import Path
print("started", os.environ["AIR_JOB_ID"], "attempt", os.environ.get("AIR_ATTEMPT"), flush=True)
for i in range(1, 4):
    print(f"line {i}", flush=True)
release = Path(sys.argv[1])
while not release.exists():  # the job's own behaviour: hold its GPUs until released
    time.sleep(0.05)
print("released", flush=True)
"""

REPORT = """\
import json, os, sys
import mlflow
cfg = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("config", json.dumps(cfg, sort_keys=True))
for key in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "AIR_CHECKPOINT_DIR", "AIR_DATA_DIR",
            "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MY_VAR"):
    print(f"env {key}={os.environ.get(key)}")
print("argv", json.dumps(sys.argv[1:]))
with mlflow.start_run():
    for step in range(3):
        mlflow.log_metric("loss", 1.0 / (step + 1) * cfg["lr"], step=step)
print("---")
print("final_score: 0.75")
"""

FLAKY = """\
import os, sys
attempt = int(os.environ["AIR_ATTEMPT"])
print("attempt", attempt, flush=True)
sys.exit(3 if attempt == 1 else 0)
"""


@pytest.fixture(scope="session")
def ray_head() -> Iterator[Any]:
    """A local Ray head for the session, stopped (its own processes only) at the end."""
    pytest.importorskip("ray.job_submission")
    from ray._raylet import Config

    Config.initialize("")  # read RAY_AUTH_MODE now, whatever ran before in this process
    from air_skills.testing.ray_head import LocalRayHead

    head = LocalRayHead(
        num_gpus=4,
        num_cpus=2,
        env={
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": RAY_TOKEN,
            "RAY_JOB_START_TIMEOUT_SECONDS": str(START_TIMEOUT_S),
        },
    )
    head.start()
    try:
        yield head
    finally:
        head.stop()


@pytest.fixture
def ray_client(client: Any, ray_head: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Client whose RAY_ADDRESS is the session's head; Ray jobs left live are stopped."""
    monkeypatch.setenv("RAY_ADDRESS", ray_head.address)
    yield client
    from ray.job_submission import JobSubmissionClient

    ray = JobSubmissionClient(ray_head.address)

    def live() -> list[Any]:
        return [j for j in ray.list_jobs() if not j.status.is_terminal()]

    for job in live():
        ray.stop_job(job.submission_id)
    wait_until(lambda: not live(), timeout_s=60)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A small working_dir with the test jobs' scripts."""
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "hold.py").write_text(HOLD)
    (wd / "report.py").write_text(REPORT)
    (wd / "flaky.py").write_text(FLAKY)
    return wd


def ray_cli(*args: str) -> list[str]:
    """argv for Ray's own CLI from this virtual environment."""
    return [str(Path(sys.executable).parent / "ray"), *args]
