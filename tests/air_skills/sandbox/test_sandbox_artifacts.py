"""Issue 25: a sandboxed job's MLflow artifacts (and params, tags) reach its run in the shared
store through its supervisor's relay, as its metrics do; a link it plants to a host file is not
followed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox

PY = sys.executable
pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")

JOB = r"""
import os, mlflow
from urllib.parse import urlparse
report = os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "report.txt")
open(report, "w").write("hello artifact")
mlflow.log_artifact(report)
mlflow.log_artifact(report, "plots")
mlflow.log_param("lr", "0.1")
mlflow.set_tag("phase", "warm")
mlflow.log_metric("loss", 0.5)
here = urlparse(mlflow.get_artifact_uri()).path
os.symlink(os.path.join(os.environ["AIR_HOME"], "air.db"), os.path.join(here, "stolen.db"))
print("logged", flush=True)
"""


def test_a_sandboxed_jobs_artifacts_params_and_tags_land_in_its_shared_run(
    client: Client, air_home: Path, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    from air_skills.tracking.mlflow import tracking_uri

    info = client.launch(JobSpec(command=[PY, "-c", JOB], name="artifacts", code="live"))
    assert info.sandbox == "bwrap" and info.run_id
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, (done.message, client.logs(info.job_id).text)
    shared = MlflowClient(tracking_uri(air_home))
    top = {a.path for a in shared.list_artifacts(info.run_id)}
    assert {"report.txt", "plots"} <= top
    assert "stolen.db" not in top  # the planted link was not followed
    assert [a.path for a in shared.list_artifacts(info.run_id, "plots")] == ["plots/report.txt"]
    got = Path(shared.download_artifacts(info.run_id, "plots/report.txt", str(tmp_path)))
    assert got.read_text() == "hello artifact"
    run = shared.get_run(info.run_id)
    assert run.data.params["lr"] == "0.1" and run.data.tags["phase"] == "warm"
    assert run.data.metrics["loss"] == 0.5
