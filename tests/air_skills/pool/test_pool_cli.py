"""The CLI on a shared pool (issue 29): `air launch --no-duplicate/--allow-duplicate`, `air ls`
saying who launched each job (ids whole in 80 columns) and `--launched-by`; the job's MLflow
run tagged air.launched_by."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from air_skills import Client
from air_skills.runtime.store.identities import Identity

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
HOLD = "import time; time.sleep(300)"


def air(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "AIR_HOME": str(home), "COLUMNS": "80", **env}
    work = home.parent / "work"  # the launches' folder: a snapshot of it alone (not the repo's
    work.mkdir(exist_ok=True)  # tree, which others edit: another tree is another experiment)
    return subprocess.run(
        [AIR, *args], capture_output=True, text=True, env=full, timeout=120, cwd=work
    )


def test_launch_refuses_or_allows_a_duplicate_as_asked(air_home: Path, tmp_path: Path) -> None:
    (air_home.parent / "work").mkdir()
    (air_home.parent / "work" / "train.py").write_text(HOLD)
    run = ("launch", "--set", "lr=0.1", "--json", "--", sys.executable, "train.py")
    first = air(air_home, *run)
    assert first.returncode == 0, first.stdout + first.stderr
    second = air(air_home, *run)  # the local user: AIR_DEDUP=identities, not checked
    assert second.returncode == 0, second.stdout + second.stderr
    ids = {json.loads(first.stdout)["job_id"], json.loads(second.stdout)["job_id"]}
    refused = air(air_home, run[0], "--no-duplicate", *run[1:])
    assert refused.returncode != 0, air(air_home, "ls").stdout + refused.stdout
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "duplicate" and error["context"]["job_id"] in ids
    again = air(air_home, run[0], "--allow-duplicate", *run[1:], AIR_DEDUP="always")
    assert again.returncode == 0, again.stdout + again.stderr
    always = air(air_home, *run, AIR_DEDUP="always")
    assert always.returncode != 0, air(air_home, "ls").stdout + always.stdout
    assert "allow_duplicate" in always.stderr + always.stdout


def test_ls_says_who_launched_each_job_and_filters_by_it(
    air_home: Path, client: Client, tmp_path: Path
) -> None:
    client.add_identity("agent-with-a-long-name", "lab", unsandboxed=True)
    agent = client.as_identity(Identity("agent-with-a-long-name", "lab", unsandboxed=True))
    spec = {"command": [sys.executable, "-c", HOLD], "code": "live", "track": False}
    mine = client.launch(spec)
    theirs = agent.launch({**spec, "config": {"n": 1}})
    listed = air(air_home, "ls")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert "by" in lines[0].split()
    assert all(len(line) <= 80 for line in lines), lines
    row = next(line for line in lines if theirs.job_id in line)  # the id whole
    assert "agent-" in row and mine.launched_by not in row
    only = air(air_home, "ls", "--launched-by", "agent-with-a-long-name", "--json")
    assert [j["job_id"] for j in json.loads(only.stdout)] == [theirs.job_id]
    alone = air(air_home, "ls", "--launched-by", str(mine.launched_by))
    assert "by" not in alone.stdout.splitlines()[0].split()  # one launcher: no column


def test_the_jobs_run_is_tagged_with_who_launched_it(client: Client, tmp_path: Path) -> None:
    client.add_identity("tagger", "lab", unsandboxed=True)
    agent = client.as_identity(Identity("tagger", "lab", unsandboxed=True))
    code = "print('---'); print('loss: 1')"
    info = agent.launch({"command": [sys.executable, "-c", code], "code": "live"})
    done = client.wait([info.job_id], timeout_s=120)[0]
    run = client.tracker.client.get_run(done.run_id)
    assert run.data.tags["air.launched_by"] == "tagger"
