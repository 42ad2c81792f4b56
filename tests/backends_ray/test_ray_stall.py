"""Stall detection on Ray (real local head): the local supervisor's watch on reconcile's tick.
A silent loop is stalled and handled by on_stall (fail; notify keeps it running and a wait
says so); a job that keeps printing under the same short timeout is not."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from air_skills.models import JobStatus

pytestmark = pytest.mark.slow
PY = sys.executable
SILENT = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(0.05)\n"
CHATTY = "import time\nfor i in range(16):\n    print('step', i, flush=True)\n    time.sleep(0.5)\n"


def launch(client: Any, workdir: Path, script: str, **spec: Any) -> Any:
    return client.launch(
        {"command": [PY, script], "workdir": str(workdir), "backend": "ray", "track": False,
         "stall_timeout_min": 0.05, **spec}
    )  # fmt: skip


def test_a_silent_ray_job_is_stalled_and_handled_by_on_stall(
    ray_client: Any, workdir: Path
) -> None:
    (workdir / "silent.py").write_text(SILENT)
    (workdir / "chatty.py").write_text(CHATTY)
    silent = launch(ray_client, workdir, "silent.py", on_stall="fail")
    chatty = launch(ray_client, workdir, "chatty.py")
    done = {i.job_id: i for i in ray_client.wait([silent.job_id, chatty.job_id], 180, any=False)}
    failed = done[silent.job_id]
    assert failed.status == JobStatus.FAILED and failed.failure_kind == "user", failed.message
    assert "reason: stalled" in failed.message and "silent.py:" in failed.message
    stacks = ray_client.store.row(silent.job_id).log_path
    assert "silent.py" in (Path(stacks).parent / "stacks.txt").read_text()
    assert done[chatty.job_id].status == JobStatus.SUCCEEDED, done[chatty.job_id].message

    notified = launch(ray_client, workdir, "silent.py", on_stall="notify")
    [seen] = ray_client.wait([notified.job_id], 120)  # a stall ends a wait, and says so
    assert seen.status == JobStatus.RUNNING and "reason: stalled" in seen.message, seen.message
    assert "on_stall: notify" in ray_client.get(notified.job_id).message
    ray_client.cancel(notified.job_id)
