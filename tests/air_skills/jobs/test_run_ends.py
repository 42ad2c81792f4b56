"""Every path to a terminal state ends the job's MLflow run: none is left RUNNING."""

from __future__ import annotations

import sys

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus

PY = sys.executable


@pytest.mark.slow
def test_cancelling_a_queued_job_ends_its_run(client: Client) -> None:
    holder = client.launch(JobSpec(command=[PY, "-c", "import time; time.sleep(60)"], gpus=4))
    queued = client.launch(JobSpec(command=[PY, "-c", "pass"], gpus=1))
    assert queued.status == JobStatus.QUEUED and queued.run_id
    info = client.cancel(queued.job_id)
    assert info.status == JobStatus.CANCELLED
    run = client.runtime.tracker.client.get_run(queued.run_id)
    assert run.info.status == "KILLED"
    client.cancel(holder.job_id)
    wait_until(lambda: client.get(holder.job_id).status.is_terminal())
