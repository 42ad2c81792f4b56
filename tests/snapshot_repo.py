"""Code-snapshot test helpers: a real git repository and a job that waits on a marker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import wait_until

from air_skills import Client, JobInfo

PY = sys.executable

# Waits for a marker file before importing model.py: the test edits the tree first, no race.
TRAIN = """\
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
import model
print("model says", model.VALUE, "digest", os.environ.get("AIR_CODE_DIGEST", "none"))
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    (path / "train.py").write_text(TRAIN)
    (path / "model.py").write_text("VALUE = 1\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "init")
    return path


def launch(client: Client, repo: Path, marker: Path, **kw: object) -> JobInfo:
    spec = {"command": [PY, "train.py", str(marker)], "workdir": str(repo), "track": False}
    return client.launch({**spec, **kw})


def finished(client: Client, job_id: str) -> JobInfo:
    return wait_until(lambda: (i := client.get(job_id)).is_terminal and i, timeout_s=60)


PATCH = """diff --git a/model.py b/model.py
--- a/model.py
+++ b/model.py
@@ -1 +1 @@
-VALUE = 1
+VALUE = 42
"""
