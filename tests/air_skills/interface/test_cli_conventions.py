"""The `air` CLI behaves like the tools people know (issue 23): a launch refuses what a dry run
refuses, id prefixes, narrow tables, Ctrl-C in a follow, usage errors in JSON, --version, help."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air_skills.cli.app import app


def run(*args: str, code: int = 0) -> Any:
    """`air ARGS` in this process; asserts the exit code."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.stderr + result.stdout
    return result


def test_a_real_launch_refuses_what_a_dry_run_refuses(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text("print('ran')\n")
    monkeypatch.chdir(tmp_path)
    typo = run("launch", "--", sys.executable, "trian.py", code=2)
    assert typo.stderr.startswith("[invalid-spec] the command would not start")
    assert "trian.py: no such file" in typo.stderr and "did you mean train.py?" in typo.stderr
    assert "--no-check-command" in typo.stderr  # the way out, in the Next: line
    program = run("launch", "--json", "--", "pyhton", "train.py", code=2)
    error = json.loads(program.stdout)["error"]
    assert error["code"] == "invalid-spec"
    assert any("did you mean python" in p for p in error["context"]["problems"])
    assert json.loads(run("ls", "--json").stdout) == []  # nothing queued
    # A job that writes its script first: the check is off when asked.
    writes = f"{tmp_path / 'later.py'}"
    made = run("launch", "--json", "--no-check-command", "--", sys.executable, writes)
    assert json.loads(made.stdout)["status"] in ("QUEUED", "RUNNING", "FAILED")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"command: [{sys.executable}, later.py]\ncheck_command: false\ntrack: false\n")
    assert json.loads(run("launch", str(spec), "--json").stdout)["job_id"].startswith("job-")
