"""The first launch on a fresh home (issue 24, item 12): air-mcp's warm-up starts an idle
supervisor for the home, so the agent's first launch hands its job over, as every later
launch does, instead of forking a supervisor inside the call (times: bench/first_launch.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from air_skills import JobStatus
from mcp_server.server import long_lived_client


def test_the_first_launch_is_handed_to_the_idle_supervisor(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "30")  # it waits for the first job
    (tmp_path / "t.py").write_text("print('---')\nprint('loss: 1')\n")
    client = long_lived_client()
    deadline = time.monotonic() + 60
    idle: list[int] = []
    while not idle and time.monotonic() < deadline:  # the warm-up runs aside
        idle = [r[0] for r in client.store.read("SELECT pid FROM idle_supervisors", ())]
        time.sleep(0.05)
    assert len(idle) == 1, "the warm-up started no idle supervisor"
    try:
        info = client.launch({"command": [sys.executable, "t.py"], "workdir": str(tmp_path)})
        (done,) = client.wait([info.job_id], 120)
        assert done.status == JobStatus.SUCCEEDED, done.message
        assert client.store.row(info.job_id).supervisor_pid == idle[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(idle[0], signal.SIGTERM)  # lingering again after its job
