"""A loop killed (kill -9) at an exact journal line, then resumed: no trial is lost.

``start_loop(..., crash_at=EVENT)`` makes the loop kill itself right after it journals EVENT
(``AIR_TEST_CRASH_AT``), so each test names the point it protects.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from ar_helpers import small_study, start_loop
from helpers import wait_until

from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import run_study

POLL_S = 0.2


def events(study_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in Journal(study_dir).read() if kind is None or e["event"] == kind]


def test_resume_relaunches_a_trial_whose_relaunch_after_an_infra_failure_was_not_journaled(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills import Client

    monkeypatch.setenv("AIR_SANDBOX", "off")  # the trial marks its hang in tmp_path
    folder, study_file, marker = tmp_path / "study", tmp_path / "study.yaml", tmp_path / "hung"
    data = small_study(
        name="lost-relaunch",
        base_config={"x": 0.0, "y": 0.0, "steps": 2, "sleep_s": 0.05, "hang_once": str(marker)},
        budget={"trials": 1, "concurrency": 1},
    )
    study_file.write_text(yaml.safe_dump(data))
    # No infra retries in the core: a lost supervisor fails the job, and the loop relaunches.
    proc = start_loop(study_file, folder, crash_at="infra_retry", AIR_MAX_INFRA_RETRIES="0")
    try:
        wait_until(marker.exists, timeout_s=90)  # the first attempt runs (and hangs)
        job_id = events(folder, "launched")[0]["job_id"]
        store = Client().store  # the row only: a Client call would settle the job here
        pid = wait_until(lambda: store.row(job_id).supervisor_pid, timeout_s=30)
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=90) == -signal.SIGKILL, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert events(folder)[-1]["event"] == "infra_retry"  # killed right after that line

    result = run_study(folder, resume=True, poll_s=POLL_S)
    assert result.stop_reason == "budget:trials"
    st = replay(events(folder))
    trial = st.trials[0]
    assert trial.status == TrialStatus.SUCCEEDED and trial.decision == "baseline"
    launches = events(folder, "launched")
    assert [e["attempt"] for e in launches] == [1, 2]
    assert trial.job_id == launches[1]["job_id"] != job_id
    assert Client().get(trial.job_id).status.value == "SUCCEEDED"
