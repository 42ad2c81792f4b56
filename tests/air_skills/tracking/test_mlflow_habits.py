"""MLflow habits kept (issue 38.3): a job that calls mlflow.set_experiment, start_run with or
without a name, autolog (scikit-learn) or nested runs logs into its own run (or a child of it)
and never fails for the variables air injects. Real MLflow, real sandbox."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox

PY = sys.executable

SET_EXPERIMENT = """
import mlflow
mlflow.set_experiment("my-own-experiment")
with mlflow.start_run():
    mlflow.log_param("width", 64)
    mlflow.set_tag("stage", "try")
    mlflow.log_metric("val_loss", 0.5, step=1)
"""
NAMED_RUN = """
import mlflow
mlflow.start_run(run_name="my-run")
mlflow.log_metric("val_loss", 0.25)
mlflow.end_run()
"""
ARTIFACT = """
open("notes.txt", "w").write("hello")
with mlflow.start_run():
    mlflow.log_artifact("notes.txt")
"""
NESTED = """
import mlflow
with mlflow.start_run():
    mlflow.log_metric("val_loss", 0.75)
    with mlflow.start_run(nested=True):
        mlflow.log_param("fold", 1)
        mlflow.log_metric("fold_loss", 1.5)
"""
AUTOLOG = """
import mlflow, numpy as np
from sklearn.linear_model import Ridge
mlflow.set_experiment("sk")
mlflow.autolog(log_models=False, log_datasets=False, silent=True)
X = np.arange(20.0).reshape(10, 2)
Ridge(alpha=0.5).fit(X, X.sum(axis=1))
"""


def run_job(client: Client, tmp_path: Path, source: str, **kw: object):
    script = tmp_path / "train.py"
    script.write_text(source)
    spec = JobSpec(command=[PY, str(script)], experiment="air-made", sandbox="on", **kw)  # type: ignore[arg-type]
    info = client.wait([client.launch(spec).job_id], timeout_s=180)[0]
    assert info.status == JobStatus.SUCCEEDED, (info.message, client.logs(info.job_id).text)
    return info


@pytest.fixture(autouse=True)
def _needs_sandbox() -> None:
    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")


def test_set_experiment_keeps_the_jobs_run_and_records_the_name(
    client: Client, tmp_path: Path
) -> None:
    info = run_job(client, tmp_path, SET_EXPERIMENT)
    run = client.tracker.client.get_run(info.run_id)
    assert run.info.experiment_id == info.experiment_id  # the experiment air made
    assert client.tracker.client.get_experiment(info.experiment_id).name == "air-made"
    assert run.data.tags["air.asked_experiment"] == "my-own-experiment"
    assert run.data.params["width"] == "64" and run.data.tags["stage"] == "try"
    assert client.metrics(info.job_id).latest["val_loss"] == 0.5
    assert "air.asked_experiment" in client.logs(info.job_id).text  # said, on stderr


def test_a_named_run_logs_into_the_jobs_run(
    client: Client, air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # wherever air runs from, artifacts live under AIR_HOME (38.4)
    info = run_job(client, tmp_path, NAMED_RUN + ARTIFACT)
    assert client.metrics(info.job_id).latest["val_loss"] == 0.25
    location = client.tracker.client.get_experiment(info.experiment_id).artifact_location
    assert location.startswith((air_home / "mlartifacts").resolve().as_uri()), location
    assert list((air_home / "mlartifacts").rglob("notes.txt")), "the artifact is under the home"
    assert not (tmp_path / "mlruns").exists()


def test_nested_runs_reach_the_store_as_children(client: Client, tmp_path: Path) -> None:
    info = run_job(client, tmp_path, NESTED)
    assert client.metrics(info.job_id).latest["val_loss"] == 0.75
    mc = client.tracker.client
    children = mc.search_runs(
        [info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{info.run_id}'"
    )
    assert len(children) == 1, children  # relayed out of the sandbox, a child of the job's run
    child = children[0]
    assert child.data.metrics["fold_loss"] == 1.5 and child.data.params["fold"] == "1"
    assert child.info.status == "FINISHED"


def test_autolog_with_scikit_learn(client: Client, tmp_path: Path) -> None:
    info = run_job(client, tmp_path, AUTOLOG)
    run = client.tracker.client.get_run(info.run_id)
    assert run.data.params.get("alpha") == "0.5", run.data.params
    assert run.data.tags["air.asked_experiment"] == "sk"
