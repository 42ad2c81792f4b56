"""The `air` CLI: parsing and output in-process (typer's CliRunner), the whole path through
real `air` processes (exit codes, streaming, a corrupt home)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air_skills.cli.app import app

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
JOBINFO_KEYS = {
    "job_id",
    "name",
    "status",
    "failure_kind",
    "exit_code",
    "signal",
    "message",
    "gpus",
    "priority",
    "attempts",
    "created_at",
    "started_at",
    "ended_at",
    "run_id",
    "experiment_id",
    "log_path",
    "backend",
}


def air(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([AIR, *args], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def run(*args: str, code: int = 0) -> Any:
    """`air ARGS` in this process; asserts the exit code."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.stderr + result.stdout
    return result


def run_json(command: str, *args: str, code: int = 0) -> Any:
    """`air COMMAND --json ARGS` (before any `--`), its stdout parsed."""
    return json.loads(run(command, "--json", *args, code=code).stdout)


@pytest.mark.slow
def test_done_when_gpu_index_in_logs(air_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "2")
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    info = json.loads(
        air("launch", "--json", "--gpus", "1", "--", sys.executable, "-c", code).stdout
    )
    assert JOBINFO_KEYS <= set(info)
    waited = json.loads(air("wait", info["job_id"], "--json", "--timeout", "60").stdout)
    assert isinstance(waited, list) and waited[0]["status"] == "SUCCEEDED"
    assert air("logs", info["job_id"]).stdout.strip() in {"0", "1"}
    status = json.loads(air("status", info["job_id"], "--json").stdout)
    assert status["gpus"] == [int(air("logs", info["job_id"]).stdout)]
    listed = json.loads(air("ls", "--json").stdout)
    assert [j["job_id"] for j in listed] == [info["job_id"]]


def test_launch_from_spec_file_with_overrides(air_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        'command: [python, -c, "import json,os;'
        " print(json.load(open(os.environ['AIR_CONFIG_FILE'])))\"]\n"
        "name: from-file\nconfig: {lr: 0.1, steps: 5}\ntrack: false\n"
    )
    info = run_json("launch", str(spec), "--set", "lr=0.5")
    assert info["name"] == "from-file"
    run("wait", info["job_id"], "--timeout", "60")
    assert "'lr': 0.5" in run("logs", info["job_id"]).stdout


def test_launch_keeps_the_command_after_double_dash_whole(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What follows `--` is the job's argv, its own options included; before it, ours."""
    for script in ("x.py", "from_file.py", "given.py"):  # a dry run checks they are there
        (tmp_path / script).write_text("")
    monkeypatch.chdir(tmp_path)
    out = run_json("launch", "--dry-run", "--gpus", "1", "--", "python", "x.py", "--lr", "3")
    assert "['python', 'x.py', '--lr', '3']" in out["message"]
    out = run_json("launch", "--dry-run", "--", "python", "x.py", "--json", "--", "--gpus", "9")
    assert "['python', 'x.py', '--json', '--', '--gpus', '9']" in out["message"]
    spec = tmp_path / "job.yml"
    spec.write_text("command: [python, from_file.py]\nname: spec\n")
    out = run_json("launch", str(spec), "--dry-run")
    assert "from_file.py" in out["message"]
    out = run_json("launch", str(spec), "--dry-run", "--", "python", "given.py")
    assert "given.py" in out["message"] and "from_file.py" not in out["message"]
    bad = run("launch", "train.py", "--", "x", code=2)
    assert bad.stderr.startswith("[invalid-input] unexpected arguments ['train.py']")
    assert "Next: put the command after `--`" in bad.stderr
    assert "no command to run" in run("launch", "--dry-run", "--", code=2).stderr
    assert run("launch", "--no-such-option", "--", "true", code=2).stderr  # typer's usage error


def test_dry_run_launches_nothing(air_home: Path) -> None:
    out = run_json("launch", "--dry-run", "--gpus", "2", "--", "true")
    assert out["message"].startswith("DRY RUN")
    assert run_json("ls") == []


def test_dry_run_refuses_a_command_that_would_not_start(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    result = run("launch", "--dry-run", "--", "pyhton", "train.py", code=2)
    assert result.stderr.startswith("[invalid-spec] dry run: the command would not start")
    assert "pyhton: not found on PATH; did you mean python" in result.stderr
    assert "\nNext: " in result.stderr and "WOULD NOT START" not in result.stdout
    error = run_json("launch", "--dry-run", "--", sys.executable, "trian.py", code=2)["error"]
    assert error["code"] == "invalid-spec"
    assert error["context"]["problems"] == [
        f"trian.py: no such file in {tmp_path.resolve()}; did you mean train.py?"
    ]
    assert run_json("ls") == []  # nothing was queued
    out = run_json("launch", "--dry-run", "--", sys.executable, "train.py")
    assert out["job_id"] == "dry-run" and "WOULD NOT START" not in out["message"]


def test_bad_input_exit_2_with_code_and_next_step(air_home: Path) -> None:
    result = run("launch", "--gpus", "9", "--", "true", code=2)
    assert result.stderr.startswith("[insufficient-gpus] ") and "\nNext: " in result.stderr
    result = run("status", "job-0000000000", code=2)
    assert result.stderr.startswith("[not-found] ")
    assert "priority" in run("launch", "--priority", "urgent", "--", "true", code=2).stderr
    error = run_json("launch", "--gpus", "-1", "--", "true", code=2)["error"]
    assert error["code"] == "invalid-spec"
    assert set(error) >= {"code", "message", "hint", "retryable"}


@pytest.mark.slow
def test_cancel_finished_and_all(air_home: Path) -> None:
    done = run_json("launch", "--", "true")["job_id"]
    run("wait", done, "--timeout", "60")
    result = run("cancel", done, code=1)
    assert result.stderr.startswith("[invalid-state] ") and "already finished" in result.stderr
    env_ids = [run_json("launch", "--gpus", "1", "--", "sleep", "60")["job_id"] for _ in range(2)]
    out = run_json("cancel", "--all")
    assert {j["job_id"] for j in out} == set(env_ids)
    assert {j["status"] for j in out} == {"CANCELLED"}
    assert "give job ids or --all" in run("cancel", code=2).stderr


@pytest.mark.slow
def test_logs_follow_streams_until_exit(air_home: Path) -> None:
    code = "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.2)"
    job = json.loads(air("launch", "--json", "--", sys.executable, "-c", code).stdout)["job_id"]
    proc = air("logs", job, "--follow")
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("line")] == [
        "line 0",
        "line 1",
        "line 2",
    ]
    assert "SUCCEEDED" in proc.stderr


def test_gpus_cordon_uncordon(air_home: Path) -> None:
    gpus = run_json("gpus")
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert {"index", "name", "memory_mb", "health", "cordoned", "reason", "job_ids"} <= set(gpus[0])
    run("cordon", "2", "--reason", "flaky fan")
    gpus = run_json("gpus")
    assert gpus[2]["cordoned"] and gpus[2]["reason"] == "flaky fan"
    assert "flaky fan" in run("gpus").stdout
    run("uncordon", "2")
    assert not run_json("gpus")[2]["cordoned"]
    run("cordon", "7", "--reason", "x", code=2)


def test_doctor_json(air_home: Path) -> None:
    report = run_json("doctor")
    names = {c["name"] for c in report["checks"]}
    assert {"gpus", "air_home", "versions"} <= names


@pytest.mark.slow
def test_wait_shows_progress_and_times_out(air_home: Path) -> None:
    job = run_json("launch", "--", "sleep", "30")["job_id"]
    out = run_json("wait", job, "--timeout", "0.5")
    assert out[0]["status"] == "RUNNING"
    run("cancel", job)


@pytest.mark.slow
def test_text_output(air_home: Path) -> None:
    job = run_json("launch", "--name", "shown", "--", "true")["job_id"]
    run("wait", job, "--timeout", "60")
    assert "job" in run("ls").stdout  # a table's header (the runner's 80 columns cut its rows)
    assert "shown" in run("status", job).stdout
    assert job in run("wait", job).stdout


def test_corrupt_home_is_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "air.db").write_text("garbage" * 200)
    proc = subprocess.run(
        [AIR, "ls"], capture_output=True, text=True, env={**os.environ, "AIR_HOME": str(home)}
    )
    assert proc.returncode == 1 and proc.stderr.startswith("[store-error] ")
    assert "corrupt" in proc.stderr
