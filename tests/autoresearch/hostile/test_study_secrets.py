"""Issue 30: a study's env values stay owner-only: 0700 folder, 0600 files, values in env.json
alone (study.yaml, .start.yaml and the journal name the variables), read back on resume."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import sys
from pathlib import Path

import yaml
from ar_helpers import TRIAL_SCRIPT, small_study, start_loop
from helpers import wait_until

from air_skills import Client
from autoresearch.api import get_study
from autoresearch.journal.journal import Journal
from autoresearch.loop.loop import run_study
from autoresearch.study.folder import ENV_FILE
from mcp_server.tools import studies


def _secret() -> str:
    return "sk-" + os.urandom(12).hex()


def _check_folder(folder: Path, secret: str) -> None:
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("study.yaml", "journal.jsonl", ENV_FILE):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    holding = [
        p.name for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()
    ]
    assert holding == [ENV_FILE], holding  # the value is in env.json, nowhere else
    saved = yaml.safe_load((folder / "study.yaml").read_text())
    assert set(saved["env"]) == {"SECRET_KEY"}  # the name stays
    started = [e for e in Journal(folder).read() if e["event"] == "session_started"]
    assert started and all(set(e["study"]["env"]) == {"SECRET_KEY"} for e in started)


def _study(name: str, secret: str, trials: int) -> dict:
    """The small study, its trials first printing a digest of the SECRET_KEY they got."""
    note = (
        "import hashlib, os, runpy, sys;"
        " print('key', hashlib.sha256(os.environ.get('SECRET_KEY', '').encode()).hexdigest());"
        f" sys.argv = [{str(TRIAL_SCRIPT)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    data = small_study(name=name, env={"SECRET_KEY": secret}, budget={"trials": trials})
    data["budget"]["concurrency"] = 1
    data["command"] = [sys.executable, "-c", note]
    return data


def _trials_got(folder: Path, secret: str) -> int:
    digest = hashlib.sha256(secret.encode()).hexdigest()
    jobs = [e["job_id"] for e in Journal(folder).read() if e["event"] == "launched"]
    for job_id in jobs:
        assert f"key {digest}" in Client().logs(job_id).text, job_id
    return len(jobs)


def test_a_cli_study_keeps_its_env_values_owner_only_and_a_resume_reads_them_back(
    study_home: Path, tmp_path: Path
) -> None:
    secret = _secret()
    folder, study_file = tmp_path / "study", tmp_path / "study.yaml"
    data = _study("secrets", secret, trials=2)
    study_file.write_text(yaml.safe_dump(data))
    proc = start_loop(study_file, folder, crash_at="launched")  # killed after its first launch
    try:
        assert proc.wait(timeout=90) == -signal.SIGKILL, proc.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    _check_folder(folder, secret)
    result = run_study(folder, resume=True, poll_s=0.2)  # from the folder: names only there
    assert result.stop_reason == "budget:trials"
    _check_folder(folder, secret)
    assert _trials_got(folder, secret) >= 2  # the resumed trials got the value


def test_mcp_start_study_writes_no_value_outside_env_json(study_home: Path, tmp_path: Path) -> None:
    secret = _secret()
    folder = tmp_path / "bg"
    data = _study("secrets-bg", secret, trials=1)
    reply = studies.start_study(Client(), study=data, study_dir=str(folder))  # the MCP tool
    assert secret not in reply.model_dump_json()
    start = folder / ".start.yaml"
    assert stat.S_IMODE(start.stat().st_mode) == 0o600
    assert secret not in start.read_text() and "SECRET_KEY" in start.read_text()
    wait_until(lambda: get_study(folder)["state"] != "running", timeout_s=120)
    _check_folder(folder, secret)
    assert _trials_got(folder, secret) == 1
