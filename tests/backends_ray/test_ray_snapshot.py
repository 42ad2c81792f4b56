"""The Ray backend runs a job's code snapshot: the tree as launched, uploaded once per digest."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from helpers import wait_until
from snapshot_repo import PATCH, make_repo

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
