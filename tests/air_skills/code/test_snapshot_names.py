"""A file name that is not UTF-8 in the tree (issue 30): refused by name, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills import Client
from air_skills.errors import InvalidSpec

PY = sys.executable
AIR = str(Path(PY).parent / "air")
BAD = b"bad\xff.py"


def make(root: Path, git: bool) -> Path:
    root.mkdir()
    (root / "ok.py").write_text("print('ran')\n")
    with open(os.path.join(os.fsencode(root), BAD), "w") as f:
        f.write("X = 1\n")
    if git:
        run = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*run, "init", "-q"], check=True)
        subprocess.run([*run, "add", "-A"], check=True)
        subprocess.run([*run, "commit", "-qm", "base"], check=True)
    return root


@pytest.mark.parametrize("git", [True, False], ids=["git-tree", "plain-folder"])
def test_a_name_that_is_not_utf8_is_refused_by_name(
    client: Client, tmp_path: Path, git: bool
) -> None:
    if git and shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = make(tmp_path / "tree", git)
    done = subprocess.run(
        [AIR, "launch", "--json", "--dry-run", "--", PY, "ok.py"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    err = json.loads(done.stdout or done.stderr)["error"]
    assert err["code"] == "invalid-spec" and "bad\\xff.py" in err["message"]
    assert ".airignore" in err["hint"]
    spec = {"command": [PY, "ok.py"], "workdir": str(root), "track": False}
    with pytest.raises(InvalidSpec, match=r"not UTF-8: bad\\xff\.py"):
        client.launch(spec)
    assert list(client.list().items) == []
    # listed in .airignore, the rest of the tree launches
    (root / ".airignore").write_text("bad*.py\n")
    info = client.launch(spec)
    assert info.code is not None and info.code.files == 2  # ok.py and .airignore
