"""The tinygpt example as a 2-rank DDP job through `air` (gloo on CPU), logging from rank 0."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from air_skills import Client, JobSpec, JobStatus
from air_skills.tracking.mlflow import tracking_uri

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.slow
def test_tinygpt_trains_as_ddp_with_two_ranks(client: Client, air_home: Path) -> None:
    spec = JobSpec(
        command=[sys.executable, str(EXAMPLES / "tinygpt" / "train.py")],
        config={"steps": 20, "eval_every": 10, "eval_batches": 2},
        procs=2,
        cpus=2,
        code="live",
        workdir=str(EXAMPLES.parent),
    )
    info = client.launch(spec)
    info = client.wait([info.job_id], timeout_s=240)[0]
    log = client.logs(info.job_id, tail=None).text
    assert info.status == JobStatus.SUCCEEDED, (info.message, log)
    assert "[rank0]: tinygpt:" in log and "ranks 2" in log
    assert "[rank1]: tinygpt:" not in log  # rank 1 trains but does not print
    assert "[rank0]: ranks: 2" in log  # the summary block, from rank 0
    assert info.run_id
    mlflow = MlflowClient(tracking_uri(air_home))
    history = [m.step for m in mlflow.get_metric_history(info.run_id, "val_loss")]
    assert history == [0, 10, 20]  # logged once per step: by rank 0 only
