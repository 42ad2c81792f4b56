"""The `air` CLI as a user runs it: real processes, exit codes, --json shapes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
        "command: [python, -c, \"import json,os;"
        " print(json.load(open(os.environ['AIR_CONFIG_FILE'])))\"]\n"
        "name: from-file\nconfig: {lr: 0.1, steps: 5}\ntrack: false\n"
    )
    info = json.loads(air("launch", str(spec), "--set", "lr=0.5", "--json").stdout)
    assert info["name"] == "from-file"
    air("wait", info["job_id"], "--timeout", "60")
    assert "'lr': 0.5" in air("logs", info["job_id"]).stdout


def test_dry_run_launches_nothing(air_home: Path) -> None:
    out = json.loads(air("launch", "--dry-run", "--json", "--gpus", "2", "--", "true").stdout)
    assert out["message"].startswith("DRY RUN")
    assert json.loads(air("ls", "--json").stdout) == []


def test_bad_input_exit_2_with_code_and_hint(air_home: Path) -> None:
    proc = air("launch", "--gpus", "9", "--", "true", check=False)
    assert proc.returncode == 2
    assert "error[insufficient-gpus]" in proc.stderr and "hint:" in proc.stderr
    proc = air("status", "job-0000000000", check=False)
    assert proc.returncode == 2 and "error[not-found]" in proc.stderr
    proc = air("launch", "--priority", "urgent", "--", "true", check=False)
    assert proc.returncode == 2 and "priority" in proc.stderr
    proc = air("launch", "--json", "--gpus", "-1", "--", "true", check=False)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "invalid-spec"


def test_cancel_finished_and_all(air_home: Path) -> None:
    done = json.loads(air("launch", "--json", "--", "true").stdout)["job_id"]
    air("wait", done, "--timeout", "60")
    proc = air("cancel", done, check=False)
    assert proc.returncode == 1 and "already finished" in proc.stderr
    env_ids = [
        json.loads(air("launch", "--json", "--gpus", "1", "--", "sleep", "60").stdout)["job_id"]
        for _ in range(2)
    ]
    out = json.loads(air("cancel", "--all", "--json").stdout)
    assert {j["job_id"] for j in out} == set(env_ids)
    assert {j["status"] for j in out} == {"CANCELLED"}


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
    gpus = json.loads(air("gpus", "--json").stdout)
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert {"index", "name", "memory_mb", "health", "cordoned", "reason", "job_ids"} <= set(gpus[0])
    air("cordon", "2", "--reason", "flaky fan")
    gpus = json.loads(air("gpus", "--json").stdout)
    assert gpus[2]["cordoned"] and gpus[2]["reason"] == "flaky fan"
    air("uncordon", "2")
    assert not json.loads(air("gpus", "--json").stdout)[2]["cordoned"]
    assert air("cordon", "7", "--reason", "x", check=False).returncode == 2


def test_doctor_json(air_home: Path) -> None:
    report = json.loads(air("doctor", "--json").stdout)
    names = {c["name"] for c in report["checks"]}
    assert {"gpus", "air_home", "versions"} <= names


def test_wait_shows_progress_and_times_out(air_home: Path) -> None:
    job = json.loads(air("launch", "--json", "--", "sleep", "30").stdout)["job_id"]
    out = json.loads(air("wait", job, "--timeout", "0.5", "--json").stdout)
    assert out[0]["status"] == "RUNNING"
    air("cancel", job)


def test_corrupt_home_is_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "air.db").write_text("garbage" * 200)
    proc = subprocess.run(
        [AIR, "ls"], capture_output=True, text=True, env={**os.environ, "AIR_HOME": str(home)}
    )
    assert proc.returncode == 1 and "error[store-error]" in proc.stderr
    assert "corrupt" in proc.stderr
