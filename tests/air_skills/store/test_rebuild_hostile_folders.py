"""Issue 30: `air doctor --rebuild` over hostile job folders. A record whose spec does not
validate (`{"spec": {"priority": 99}}`), a record.json that is a FIFO or a link to /dev/zero,
a file where a folder should be, a 1 GiB record: each is skipped with its reason, the rest
is rebuilt, and nothing hangs or fills memory. A record's `log_path` is never used: a job's
log is its own folder's output.log, for the rebuild and for `air logs` whatever the database
says.
Real `air` processes, real SQLite."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from air_skills import Client, JobSpec

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
PRIORITY = "job-00000000a1"
FIFO = "job-00000000b2"
ZERO = "job-00000000c3"
SHADOW = "job-00000000d4"
BARE = "job-00000000e5"
FILE = "job-00000000f6"
HUGE = "job-0000000a07"


def air(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([AIR, *args], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def hostile_home(home: Path, secret: Path) -> str:
    """A home with one real job and the hostile folders beside it; returns the real job."""
    client = Client(home)
    info = client.launch(JobSpec(command=["echo", "my own log"], code="live", track=False))
    assert client.wait([info.job_id], timeout_s=60)[0].status.value == "SUCCEEDED"
    jobs = home / "jobs"
    for name in (PRIORITY, FIFO, ZERO, SHADOW, BARE, HUGE):
        (jobs / name).mkdir(mode=0o700)
    (jobs / PRIORITY / "record.json").write_text(json.dumps({"spec": {"priority": 99}}))
    os.mkfifo(jobs / FIFO / "record.json")
    (jobs / ZERO / "record.json").symlink_to("/dev/zero")
    record = {"spec": {"command": ["true"]}, "name": "stolen", "log_path": str(secret)}
    (jobs / SHADOW / "record.json").write_text(json.dumps(record))
    (jobs / SHADOW / "output.log").write_text("the job's own log\n")
    (jobs / FILE).write_text("not a folder")
    with open(jobs / HUGE / "record.json", "wb") as f:  # sparse: 1 GiB read would fill memory
        f.truncate(1 << 30)
    return info.job_id


def test_rebuild_skips_hostile_folders_with_reasons(air_home: Path, tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:SECRET-HASH:19000:0:99999:7:::\n")
    real = hostile_home(air_home, secret)

    plan = json.loads(air("doctor", "--rebuild", "--dry-run", "--json").stdout)
    done = json.loads(air("doctor", "--rebuild", "--json").stdout)
    for result in (plan, done):
        assert sorted(result["rebuilt"]) == [SHADOW, BARE], result
        reasons = {s["job_id"]: s["reason"] for s in result["skipped"]}
        assert set(reasons) == {PRIORITY, FIFO, ZERO, FILE, HUGE}, reasons
        assert "priority" in reasons[PRIORITY] and "99" in reasons[PRIORITY]
        assert "not a regular file" in reasons[FIFO]
        assert "cannot be opened" in reasons[ZERO]  # a symlink: never followed
        assert "not a folder" in reasons[FILE]
        assert "is over 16777216 bytes" in reasons[HUGE]

    shown = json.loads(air("status", SHADOW, "--json").stdout)
    assert shown["name"] == "stolen" and shown["status"] == "FAILED"
    assert shown["log_path"] == str(air_home / "jobs" / SHADOW / "output.log")
    logs = air("logs", SHADOW)
    assert "SECRET-HASH" not in logs.stdout and "the job's own log" in logs.stdout
    bare = json.loads(air("status", BARE, "--json").stdout)
    assert bare["status"] == "FAILED" and "no record.json" in bare["message"]
    assert json.loads(air("status", real, "--json").stdout)["status"] == "SUCCEEDED"


def test_air_logs_never_reads_a_log_path_from_the_database(air_home: Path, tmp_path: Path) -> None:
    """A restored or foreign database may name any file: the job's folder decides."""
    secret = tmp_path / "shadow"
    secret.write_text("root:SECRET-HASH:19000:0:99999:7:::\n")
    client = Client(air_home)
    info = client.launch(JobSpec(command=["echo", "my own log"], code="live", track=False))
    assert client.wait([info.job_id], timeout_s=60)[0].status.value == "SUCCEEDED"
    with sqlite3.connect(air_home / "air.db") as db:
        db.execute("UPDATE jobs SET log_path = ? WHERE job_id = ?", (str(secret), info.job_id))
    for args in (("logs", info.job_id), ("logs", info.job_id, "--grep", "SECRET")):
        out = air(*args).stdout
        assert "SECRET-HASH" not in out, out
    assert "my own log" in air("logs", info.job_id).stdout
    assert client.get(info.job_id).log_path == str(air_home / "jobs" / info.job_id / "output.log")
