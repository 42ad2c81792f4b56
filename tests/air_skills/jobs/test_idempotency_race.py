"""Two launchers race on one idempotency key: both pass the look-up before either inserts.

The test holds the state database's write lock, so each launcher stops at the transaction
that records its job, after its look-up found no job; it lets go once both launches have
written their intent (runtime/launch/launch_intent.py). The same spec gets one job for both; a
different spec is an ``idempotency-conflict`` for the loser, whose prepared job is discarded.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers import wait_until

from air_skills import Client
from air_skills.runtime.launch.launch_intent import BUILD_PREFIX, intents_dir

LAUNCH = """
import json, sys
from air_skills import Client, JobSpec
from air_skills.errors import AirError
try:
    info = Client().launch(JobSpec(command=["true"], track=False, code="live",
                                   config={"lr": float(sys.argv[1])}, idempotency_key="race"))
    print(json.dumps({"job_id": info.job_id}))
except AirError as exc:
    print(json.dumps({"code": exc.code, "message": exc.message, **exc.context}, default=str))
"""


@contextmanager
def write_lock(home: Path) -> Iterator[None]:
    """Hold AIR_HOME's write lock (BEGIN IMMEDIATE) until the block ends."""
    conn = sqlite3.connect(home / "air.db", isolation_level=None, timeout=60)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def race(home: Path, lrs: tuple[float, float]) -> list[dict]:
    """Launch both specs at once, past each other's look-up; each launcher's reply."""
    with write_lock(home):
        procs = [
            subprocess.Popen([sys.executable, "-c", LAUNCH, str(lr)], stdout=subprocess.PIPE)
            for lr in lrs
        ]
        try:
            # an intent is written after the look-up: both found no job under the key
            wait_until(lambda: len(list(intents_dir(home).glob("*.json"))) == 2, timeout_s=120)
        except BaseException:
            for p in procs:
                p.kill()
            raise
    return [json.loads(p.communicate(timeout=120)[0]) for p in procs]


def leftovers(home: Path) -> list[str]:
    """Prepared folders and intents that no job owns."""
    jobs = home / "jobs"
    return [p.name for p in jobs.glob(BUILD_PREFIX + "*")] + [
        p.name for p in intents_dir(home).glob("*.json")
    ]


def test_a_raced_key_with_another_spec_is_a_conflict_for_the_loser(
    client: Client, air_home: Path
) -> None:
    replies = race(air_home, (0.1, 0.2))
    won = [r for r in replies if "job_id" in r and "code" not in r]
    lost = [r for r in replies if r.get("code") == "idempotency-conflict"]
    assert len(won) == 1 and len(lost) == 1, replies
    job_id = won[0]["job_id"]
    assert lost[0]["job_id"] == job_id and lost[0]["fields"] == ["config.lr"]
    assert f"was used by {job_id}" in lost[0]["message"] and "config.lr" in lost[0]["message"]
    assert [i.job_id for i in client.list(limit=10).items] == [job_id]
    assert leftovers(air_home) == []  # the loser's prepared folder and intent are gone


def test_a_raced_key_with_the_same_spec_gives_both_the_same_job(
    client: Client, air_home: Path
) -> None:
    replies = race(air_home, (0.1, 0.1))
    assert all("code" not in r for r in replies), replies
    assert len({r["job_id"] for r in replies}) == 1
    assert [i.job_id for i in client.list(limit=10).items] == [replies[0]["job_id"]]
    assert leftovers(air_home) == []
