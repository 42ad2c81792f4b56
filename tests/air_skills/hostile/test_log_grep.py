"""Issue 30: a log search runs in RE2 (linear time): a catastrophic pattern cannot stall it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import InvalidInput

PY = sys.executable
AIR = str(Path(PY).with_name("air"))
EVIL = "(a+)+$"  # backtracks 2^40 times on 40 a's and a b in a backtracking engine
LINES = "[print('a' * 40 + 'b') for _ in range(501)]"


def _job_with_evil_lines(client: Client) -> str:
    code = f"{LINES}; print('aaa')"
    info = client.launch(JobSpec(command=[PY, "-c", code], track=False))
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    return info.job_id


def _air(*args: str) -> subprocess.CompletedProcess[str]:
    # Bounded: the old engine would take hours; the fence here only turns a hang into a failure.
    return subprocess.run([AIR, *args], capture_output=True, text=True, timeout=60, env=os.environ)


def test_a_catastrophic_pattern_returns_its_matches_from_the_client_and_the_cli(
    client: Client,
) -> None:
    job_id = _job_with_evil_lines(client)
    found = client.search_log(job_id, EVIL)
    assert found.total == 1 and [m.text for m in found.matches] == ["aaa"]
    assert found.lines == 502 and found.searched == found.size > 0
    done = _air("logs", job_id, "--grep", EVIL, "--json")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["total"] == 1 and reply["matches"][0]["line"] == 502
    text = _air("logs", job_id, "--grep", "a{40}b", "--tail", "2")
    assert text.stdout.splitlines() == ["1:" + "a" * 40 + "b", "2:" + "a" * 40 + "b"]
    assert "501 lines match" in text.stderr


def test_a_pattern_re2_does_not_support_is_an_invalid_pattern(client: Client) -> None:
    job_id = _job_with_evil_lines(client)
    for pattern in (r"(a)\1", "(?=a)b", "(?<!a)b"):
        with pytest.raises(InvalidInput) as err:
            client.search_log(job_id, pattern)
        assert err.value.code == "invalid-pattern" and "RE2" in err.value.hint
    done = _air("logs", job_id, "--grep", r"(a)\1", "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["code"] == "invalid-pattern"
    assert "re2.cc" not in done.stderr  # RE2's own log line stays out of the CLI's output


def test_a_search_past_its_deadline_stops_and_says_how_far_it_read(tmp_path: Path) -> None:
    from air_skills.runtime.results.log_search import CHECK_EVERY_LINES, search_log

    log = tmp_path / "big.log"
    log.write_text("loss=1\n" * (CHECK_EVERY_LINES * 3))
    found = search_log(log, "loss", deadline_s=0)
    assert found.lines == CHECK_EVERY_LINES and found.searched == CHECK_EVERY_LINES * 7
    assert found.size == log.stat().st_size > found.searched
    whole = search_log(log, "loss")
    assert whole.searched == whole.size and whole.total == CHECK_EVERY_LINES * 3
