"""Every numeric option of `air` is checked: out of range (or NaN) is a clean exit-2 error
through the one renderer, never a silent odd result (`air logs --tail -2` printed nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from air_skills.cli.app import app


def run(*args: str, code: int) -> object:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.stderr + result.stdout
    return result


@pytest.fixture
def job(air_home: Path) -> str:
    job_id = json.loads(run("launch", "--json", "--", "echo", "hi", code=0).stdout)["job_id"]
    run("wait", job_id, "--timeout", "60", code=0)
    return job_id


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("logs", "{job}", "--tail", "-2"), "--tail must be >= 0, not -2"),
        (("wait", "{job}", "--timeout", "-1"), "--timeout must be >= 0, not -1.0"),
        (("wait", "{job}", "--timeout", "nan"), "--timeout must be >= 0, not nan"),
        (("ls", "--limit", "0"), "--limit must be from 1 to 1000, not 0"),
        (("metrics", "{job}", "--history", "x", "--max-points", "0"), "--max-points must be >= 1"),
        (("ui", "--port", "70000"), "--port must be from 1 to 65535, not 70000"),
    ],
)
def test_out_of_range_is_exit_2(job: str, args: tuple[str, ...], said: str) -> None:
    argv = [a.format(job=job) for a in args]
    result = run(*argv, code=2)
    assert result.stderr.startswith(f"[invalid-input] {said}")
    assert "\nNext: give " in result.stderr
    error = json.loads(run(argv[0], "--json", *argv[1:], code=2).stdout)["error"]
    assert error["code"] == "invalid-input" and said in error["message"]


def test_in_range_still_works(job: str) -> None:
    assert run("logs", job, "--tail", "0", code=0).stdout == ""
    assert run("logs", job, "--tail", "1", code=0).stdout == "hi\n"
    assert run("wait", job, "--timeout", "0", code=0).stdout.startswith(job)
    spec_error = json.loads(run("launch", "--json", "--gpus", "-1", "--", "true", code=2).stdout)
    assert spec_error["error"]["code"] == "invalid-spec"  # the spec's own range check
