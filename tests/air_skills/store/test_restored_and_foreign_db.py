"""Issue 30: an older air.db restored over a home (jobs launched since are unknown to it) and
another home's air.db are no longer silent. `air doctor` names the folders the database does
not know; another home's database is refused with a store error that offers the rebuild;
`air doctor --rebuild` (a dry run first) records the folders, moving another home's database
aside. Real `air` processes, real SQLite (restored with SQLite's backup API, as `.restore`)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from air_skills import Client, JobSpec

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")


def air(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIR_HOME": str(home), "COLUMNS": "300"}
    proc = subprocess.run([AIR, *args], capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def run_jobs(home: Path, n: int) -> list[str]:
    client = Client(home)
    ids = [
        client.launch(JobSpec(command=["true"], code="live", track=False)).job_id for _ in range(n)
    ]
    done = client.wait(ids, timeout_s=120, any=False)
    assert all(i.status.value == "SUCCEEDED" for i in done), [i.message for i in done]
    client.store.close()
    return ids


def copy_db(src: Path, dest: Path) -> None:
    """``dest``'s database becomes a copy of ``src``'s (SQLite's online backup)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dest) as b:
        a.backup(b)


def age_folders(home: Path) -> None:
    """The folders as a later `air doctor` sees them (past a launch's settling time)."""
    old = time.time() - 3600
    for jdir in (home / "jobs").iterdir():
        os.utime(jdir, (old, old))


def listed(home: Path) -> set[str]:
    return {j["job_id"] for j in json.loads(air("ls", "--json", home=home).stdout)}


def records_check(home: Path) -> dict[str, str]:
    report = json.loads(air("doctor", "--json", home=home).stdout)
    (check,) = [c for c in report["checks"] if c["name"] == "job records"]
    return check


def test_restored_older_db_is_detected_and_rebuilt(air_home: Path, tmp_path: Path) -> None:
    first = run_jobs(air_home, 3)
    backup = tmp_path / "backup.db"
    copy_db(air_home / "air.db", backup)
    later = run_jobs(air_home, 2)
    copy_db(backup, air_home / "air.db")  # the restore the store error advises
    age_folders(air_home)
    assert listed(air_home) == set(first)  # the two later jobs are hidden...
    check = records_check(air_home)  # ...and the doctor says so
    assert check["status"] == "warn", check
    assert "2 job folders the database does not know" in check["detail"]
    assert all(job in check["detail"] for job in later)
    assert "air doctor --rebuild" in check["next"]

    plan = json.loads(air("doctor", "--rebuild", "--dry-run", "--json", home=air_home).stdout)
    assert plan["dry_run"] and sorted(plan["rebuilt"]) == sorted(later)
    assert listed(air_home) == set(first)  # a dry run changes nothing

    done = json.loads(air("doctor", "--rebuild", "--json", home=air_home).stdout)
    assert sorted(done["rebuilt"]) == sorted(later) and done["skipped"] == []
    assert listed(air_home) == set(first) | set(later)
    status = json.loads(air("status", later[0], "--json", home=air_home).stdout)
    assert status["status"] == "FAILED" and status["failure_kind"] == "infra"
    assert records_check(air_home)["status"] == "ok"


def test_another_homes_db_is_refused_then_moved_aside(air_home: Path, tmp_path: Path) -> None:
    mine = run_jobs(air_home, 2)
    other = tmp_path / "other_home"
    theirs = run_jobs(other, 1)
    copy_db(other / "air.db", air_home / "air.db")  # another home's database, copied in

    for args in (("ls",), ("doctor",)):
        proc = air(*args, home=air_home)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stderr.startswith("[store-error] the state database"), proc.stderr
        assert "belongs to another home" in proc.stderr
        assert "air doctor --rebuild" in proc.stderr
    assert listed(other) == set(theirs)  # the other home is untouched

    plan = json.loads(air("doctor", "--rebuild", "--dry-run", "--json", home=air_home).stdout)
    assert plan["other_home_db"] and plan["moved_aside"] is None
    assert sorted(plan["rebuilt"]) == sorted(mine)
    assert air("ls", home=air_home).returncode == 1  # still refused: nothing changed

    done = json.loads(air("doctor", "--rebuild", "--json", home=air_home).stdout)
    assert Path(done["moved_aside"]).is_file()  # kept, aside, not deleted
    assert listed(air_home) == set(mine)
    assert listed(other) == set(theirs)


def test_a_home_keeps_its_identity_across_a_lost_db(air_home: Path) -> None:
    """A new database beside this home's id file takes the home's id (not a new one)."""
    run_jobs(air_home, 1)
    ident = (air_home / "home_id").read_text().strip()
    assert len(ident) == 32 and (air_home / "home_id").stat().st_mode & 0o077 == 0
    for suffix in ("", "-wal", "-shm"):
        Path(f"{air_home / 'air.db'}{suffix}").unlink(missing_ok=True)
    refused = air("ls", home=air_home)  # the store error names the recovery command...
    assert refused.returncode == 1 and "air doctor --rebuild" in refused.stderr, refused.stderr
    done = json.loads(air("doctor", "--rebuild", "--json", home=air_home).stdout)  # ...which exists
    assert len(done["rebuilt"]) == 1 and done["moved_aside"] is None
    with sqlite3.connect(air_home / "air.db") as db:
        (value,) = db.execute("SELECT value FROM settings WHERE key='home_id'").fetchone()
    assert value == ident
