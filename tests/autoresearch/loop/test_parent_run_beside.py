"""The study's MLflow parent run never holds back its first trials (the mirror's promise: a slow
tracking server never delays a trial). The home's tracking writer may take seconds to answer
(its MLflow import on a loaded machine: 10 s here), and the loop waited for the parent run before
launching anything, so a 9 s wall-time budget ended with no trial launched. Real loop, real jobs,
the real writer: the test holds the writer's lock (a writer that does not answer yet) until the
first trial is launched, then lets the real one start."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from ar_helpers import small_study
from helpers import wait_until

from air_skills.tracking import writer
from autoresearch.journal.journal import Journal, replay
from autoresearch.loop.loop import run_study
from autoresearch.study.study import parse_study


def test_first_trial_launches_before_the_parent_run_exists(
    study_home: Path, tmp_path: Path
) -> None:
    study = parse_study(
        small_study(name="beside", budget={"trials": 1, "concurrency": 1}, noise={"repeats": 0})
    )
    folder = tmp_path / "study"
    lock = os.open(writer.spool(study_home) / writer.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # no writer starts while it is held: nothing is answered
    done: list[object] = []
    loop = threading.Thread(
        target=lambda: done.append(run_study(study, folder, poll_s=0.2)), daemon=True
    )
    loop.start()
    try:
        launched = wait_until(
            lambda: [e for e in Journal(folder).read() if e["event"] == "launched"], timeout_s=120
        )
        assert not [e for e in Journal(folder).read() if e["event"] == "mlflow_parent"]
    finally:
        os.close(lock)  # the writer may start now (the next caller's wait starts it)
    loop.join(timeout=300)
    assert done and not loop.is_alive()
    evs = Journal(folder).read()
    kinds = [e["event"] for e in evs]
    assert kinds.index("launched") < kinds.index("mlflow_parent"), kinds
    assert not [e for e in evs if "no MLflow parent" in str(e.get("message", ""))]
    st = replay(evs)
    assert st.parent_run_id and launched
    # the trials launched before the parent existed are made its children all the same
    from mlflow.tracking import MlflowClient

    mc = MlflowClient(f"sqlite:///{study_home / 'mlflow.db'}")
    assert mc.get_run(st.parent_run_id).info.status == "FINISHED"
    runs = [t.run_id for t in st.ordered() if t.run_id]
    assert runs
    for run_id in runs:
        assert mc.get_run(run_id).data.tags.get("mlflow.parentRunId") == st.parent_run_id
