"""Tracking that is down stops a study with a tracking error naming the store, never with a
false "the objective was never logged" when the trial did print it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ar_helpers import small_study
from helpers import free_port

from air_skills.errors import TrackingUnavailable
from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import run_study
from autoresearch.study.study import parse_study


def test_a_study_blames_tracking_not_the_metric_when_tracking_is_down(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # a tracking server that is down
    study = parse_study(small_study(name="untracked", budget={"trials": 3, "concurrency": 1}))
    folder = tmp_path / "study"
    with pytest.raises(TrackingUnavailable) as info:
        run_study(study, folder, poll_s=0.2)
    assert uri in info.value.message and "trial 0" in info.value.message
    assert "never logged" not in info.value.message
    st = replay(Journal(folder).read())
    assert st.last_error is not None and st.last_error["code"] == "tracking-unavailable"
    assert st.stopped and st.stopped["reason"] == "error"
    trial = st.trials[0]
    assert trial.status == TrialStatus.FAILED and trial.failure_kind == "infra"
    assert "MLflow run" in (trial.failure or "") and uri in (trial.failure or "")
    assert all(t.status.is_final() for t in st.ordered())
