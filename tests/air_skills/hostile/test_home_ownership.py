"""Issue 30: a home, code store or state file another user can change is refused (OpenSSH-like)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import StoreError

PY = sys.executable
AIR = str(Path(PY).with_name("air"))
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chowns to uid 65534: needs root")


@pytest.fixture
def base(request: pytest.FixtureRequest) -> Path:
    # Under /tmp (sticky, root's), 0755: only the home's own modes decide.
    path = Path(tempfile.mkdtemp(prefix="air-home-owner-"))
    path.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def _air_json(home: Path, *args: str) -> tuple[int, dict]:
    env = {**os.environ, "AIR_HOME": str(home)}
    out = subprocess.run(
        [AIR, *args, "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    return out.returncode, json.loads(out.stdout or out.stderr)


@needs_root
def test_a_home_another_user_made_and_can_write_is_refused(base: Path) -> None:
    home = base / "theirs"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    home.chmod(0o777)
    with pytest.raises(StoreError) as err:
        Client(home).launch(JobSpec(command=["true"], track=False))
    assert err.value.code == "unsafe-home"
    assert "uid 65534" in err.value.message and "chown" in err.value.hint
    assert not (home / "air.db").exists()  # nothing written into it, nothing run from it
    rc, reply = _air_json(home, "ls")  # the CLI says the same, with its Next
    assert rc != 0 and reply["error"]["code"] == "unsafe-home", reply
    assert "AIR_HOME" in reply["error"]["hint"]


@needs_root
def test_a_code_store_swapped_by_another_user_is_refused_before_it_runs(base: Path) -> None:
    home = base / "home"
    tree = base / "tree"
    tree.mkdir()
    (tree / "train.py").write_text("print('honest')\n")
    client = Client(home)
    first = client.launch(JobSpec(command=[PY, "train.py"], workdir=str(tree), track=False))
    assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    # Another user's copy of the code store (as if it had been writable once) is not ours.
    for path in [home / "code", *(home / "code").rglob("*")]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    with pytest.raises(StoreError) as err:
        client.launch(JobSpec(command=[PY, "train.py"], workdir=str(tree), track=False))
    assert err.value.code == "unsafe-home" and str(home / "code") in err.value.message


def test_a_home_others_can_write_is_refused_and_a_safe_one_still_works(base: Path) -> None:
    home = base / "open"
    home.mkdir(mode=0o755)
    home.chmod(0o777)
    with pytest.raises(StoreError) as err:
        Client(home).list()
    assert err.value.code == "unsafe-home" and "chmod go-w" in err.value.hint
    home.chmod(0o755)  # an older home, readable by others only: used, and tightened
    assert Client(home).list().items == []
    assert home.stat().st_mode & 0o077 == 0
    (home / "air.db").chmod(0o666)  # a state file others can write
    with pytest.raises(StoreError) as err:
        Client(home).list()
    assert err.value.code == "unsafe-home" and "air.db" in err.value.message


def test_a_home_inside_a_folder_others_can_write_is_refused(base: Path) -> None:
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone can rename the home away and put theirs there
    with pytest.raises(StoreError) as err:
        Client(shared / "home").list()
    assert err.value.code == "unsafe-home" and "above AIR_HOME" in err.value.message
    shared.chmod(0o1777)  # sticky, like /tmp: others cannot rename what is ours
    assert Client(shared / "home").list().items == []
