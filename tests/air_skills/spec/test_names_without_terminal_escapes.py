"""Issue 30: a job name holding a terminal escape (`$'esc\\x1b[31m'`) is refused as invalid-spec
(CLI, Python API, MCP launch_job); one already in the store (an older record) is shown by
`air ls` and `air status` as a visible `\\x1b` escape, never written raw to the terminal.
Real `air` processes, real SQLite."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec
from air_skills.errors import InvalidSpec

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
HOSTILE = ["esc\x1b[31mred", "bell\x07", "csi\x9b2J", "rtl\u202eexe.txt", "two\nlines"]


def air(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "300"}
    return subprocess.run(
        [AIR, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


@pytest.mark.parametrize("name", HOSTILE)
def test_cli_refuses_a_name_with_a_control_character(
    air_home: Path, tmp_path: Path, name: str
) -> None:
    proc = air("launch", "--code", "live", "--name", name, "--", "true", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("[invalid-spec] invalid job spec: name: "), proc.stderr
    assert "control character" in proc.stderr and "\x1b" not in proc.stderr
    assert not (air_home / "jobs").exists() or os.listdir(air_home / "jobs") == []


def test_python_api_and_mcp_refuse_it(client: Client, tmp_path: Path) -> None:
    from mcp_server.tools.jobs import launch_job

    with pytest.raises(InvalidSpec, match="control character"):
        client.launch(JobSpec.parse({"command": ["true"], "name": HOSTILE[0]}), dry_run=True)
    with pytest.raises(InvalidSpec, match="control character"):
        launch_job(client, ["true"], name=HOSTILE[3], workdir=str(tmp_path), dry_run=True)
    assert JobSpec.parse({"command": ["true"], "name": "ünïcode ok — 名前"}).name


def test_an_older_record_with_an_escape_is_shown_escaped(
    client: Client, air_home: Path, tmp_path: Path
) -> None:
    info = client.launch(JobSpec(command=["true"], name="placeholder", code="live", track=False))
    client.wait([info.job_id], timeout_s=60)
    with sqlite3.connect(air_home / "air.db") as db:  # as a record written before the check
        db.execute(
            "UPDATE jobs SET name = ?, message = ? WHERE job_id = ?",
            ("esc\x1b[31mred", "done\x1b]0;pwned\x07", info.job_id),
        )
    for args in (("ls",), ("status", info.job_id)):
        proc = air(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, proc.stdout
        assert "esc\\x1b[31" in proc.stdout, proc.stdout  # shown escaped (`air ls` may cut it)
    shown = json.loads(air("status", info.job_id, "--json", cwd=tmp_path).stdout)
    assert shown["name"] == "esc\x1b[31mred"  # JSON holds the value (escaped by JSON itself)
