"""The Ray backend runs a job's code snapshot: the tree as launched, uploaded once per digest."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from snapshot_repo import PATCH, make_repo

# Each starts a real Ray head (or uses the session's): end-to-end, minutes in all.
pytestmark = pytest.mark.slow

PY = sys.executable
SHOW = "import model; print('model says', model.VALUE)"


def test_the_ray_backend_uploads_the_snapshot(ray_client: Any, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = {"command": [PY, "-c", SHOW], "workdir": str(repo), "backend": "ray", "track": False}
    first = ray_client.launch(spec)
    (repo / "model.py").write_text("VALUE = 2\n")  # after launch: not what the job runs
    patched = ray_client.launch({**spec, "patch": PATCH.replace("VALUE = 1", "VALUE = 2")})
    again = ray_client.rerun(first.job_id)
    assert first.code is not None and first.code.commit and not first.code.dirty
    assert again.code.digest == first.code.digest and patched.code.patched
    for info, value in ((first, 1), (patched, 42), (again, 1)):
        done = wait_until(lambda i=info: ray_client.get(i.job_id).is_terminal, timeout_s=120)
        assert done, info.job_id
        assert f"model says {value}" in ray_client.logs(info.job_id).text
    views = list((ray_client.home / "code" / "views").iterdir())
    assert len(views) == 2  # the snapshot once (first and its rerun), and the patched one


# Says which snapshot it runs; fails its first attempt (the retry needs the snapshot again).
DIGEST_THEN_FAIL = """\
import os, sys

print("digest", os.environ.get("AIR_CODE_DIGEST", "none"), flush=True)
sys.exit(3 if os.environ["AIR_ATTEMPT"] == "1" else 0)
"""


def test_a_ray_job_gets_its_code_digest(ray_client: Any, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    info = ray_client.launch(
        {"command": [PY, "-c", DIGEST_THEN_FAIL], "workdir": str(repo), "backend": "ray",
         "track": False, "max_retries": 1}
    )  # fmt: skip
    assert info.code is not None
    done = ray_client.wait([info.job_id], timeout_s=120)[0]
    assert done.status.value == "SUCCEEDED", done.message
    assert f"digest {info.code.digest}" in ray_client.logs(info.job_id, tail=None).text


def test_a_retry_whose_snapshot_is_gone_fails_clearly(ray_client: Any, tmp_path: Path) -> None:
    from air_skills.runtime.code.snapshot import manifest_path

    repo = make_repo(tmp_path / "repo")
    info = ray_client.launch(
        {"command": [PY, "-c", DIGEST_THEN_FAIL], "workdir": str(repo), "backend": "ray",
         "track": False, "max_retries": 1}
    )  # fmt: skip
    assert info.code is not None
    manifest_path(ray_client.home, info.code.digest).unlink()  # as `air gc` would
    done = ray_client.wait([info.job_id], timeout_s=45)[0]
    assert done.status.value == "FAILED", done.message
    assert done.failure_kind == "infra"
    assert "the next attempt cannot be submitted" in done.message
    assert "no longer stored" in done.message and "retry 1 of 1" in done.message
