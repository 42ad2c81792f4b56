"""Issue 30: a container job's data folder swapped, after queueing, for a symlink outside
AIR_DATA_ROOTS is refused at start: nothing outside the roots is mounted into the container."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.scheduling import passes
from air_skills.runtime.store.store import Store


def test_a_swapped_data_folder_is_never_mounted_into_a_container(
    podman: str, client: Client, air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = tmp_path / "roots"
    (roots / "ds").mkdir(parents=True)
    (roots / "ds" / "f.txt").write_text("governed\n")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "f.txt").write_text("outside-the-roots\n")
    code = tmp_path / "code"
    code.mkdir()
    monkeypatch.setenv("AIR_DATA_ROOTS", str(roots))
    store = Store(air_home)
    for idx in range(4):
        store.cordon(idx, "test: hold the queue")
    spec = JobSpec(
        command=["sh", "-c", 'cat "$AIR_DATA_DIR/ds/f.txt"'],
        image=podman,
        gpus=1,
        workdir=str(code),
        data=[{"name": "ds", "path": str(roots / "ds")}],
        track=False,
    )
    info = client.launch(spec)
    assert info.status == JobStatus.QUEUED
    shutil.rmtree(roots / "ds")
    os.symlink(secret, roots / "ds")  # the swap, between queueing and start
    for idx in range(4):
        store.uncordon(idx)
    passes.schedule_pass(store)
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.FAILED, done
    assert "refused at start" in done.message and "outside the allowed roots" in done.message
    log = Path(done.log_path or "")
    assert not log.exists() or "outside-the-roots" not in log.read_text()
