"""Issue 30: a queued job's data folder swapped for a symlink outside AIR_DATA_ROOTS is refused
when the job starts (resolved and checked again), whatever the sandbox mode."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox
from air_skills.runtime.scheduling import passes
from air_skills.runtime.store.store import Store

PY = sys.executable
READ = (
    "import os; p = os.path.join(os.environ['AIR_DATA_DIR'], 'ds', 'f.txt');"
    "print('READ:' + open(p).read())"
)


@pytest.mark.parametrize("mode", ["off", "on"])
def test_a_data_folder_swapped_for_a_symlink_outside_the_roots_is_refused_at_start(
    client: Client, air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    if mode == "on" and sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    roots = tmp_path / "roots"
    (roots / "ds").mkdir(parents=True)
    (roots / "ds" / "f.txt").write_text("governed")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "f.txt").write_text("outside-the-roots")
    monkeypatch.setenv("AIR_DATA_ROOTS", str(roots))
    store = Store(air_home)
    for idx in range(4):
        store.cordon(idx, "test: hold the queue")
    info = client.launch(
        JobSpec(
            command=[PY, "-c", READ],
            gpus=1,
            data=[{"name": "ds", "path": str(roots / "ds")}],
            sandbox=mode,  # type: ignore[arg-type]
            track=False,
            workdir=str(tmp_path),
            code="live",
        )
    )
    assert info.status == JobStatus.QUEUED
    shutil.rmtree(roots / "ds")
    os.symlink(secret, roots / "ds")  # the swap, between queueing and start
    for idx in range(4):
        store.uncordon(idx)
    passes.schedule_pass(store)  # what the next launch or `air ls` would run
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.FAILED, done
    assert "refused at start" in done.message and "outside the allowed roots" in done.message
    assert "Next:" in done.message
    assert "outside-the-roots" not in client.logs(info.job_id, tail=None).text


def test_an_unchanged_data_input_is_read_at_its_checked_path(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = tmp_path / "roots"
    (roots / "ds").mkdir(parents=True)
    (roots / "ds" / "f.txt").write_text("governed")
    monkeypatch.setenv("AIR_DATA_ROOTS", str(roots))
    info = client.launch(
        JobSpec(
            command=[PY, "-c", READ],
            data=[{"name": "ds", "path": str(roots / "ds")}],
            track=False,
            workdir=str(tmp_path),
            code="live",
        )
    )
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, (done.message, client.logs(info.job_id).text)
    assert "READ:governed" in client.logs(info.job_id, tail=None).text
