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
    from air_skills.runtime.results.log_search import CHUNK_BYTES, search_log

    log = tmp_path / "big.log"
    line = b"loss=1\n"
    log.write_bytes(line * (3 * CHUNK_BYTES // len(line)))
    found = search_log(log, "loss", deadline_s=0)  # the deadline is checked after each chunk
    assert found.stopped_by == "deadline" and found.stopped_at == found.searched == CHUNK_BYTES
    assert found.size == log.stat().st_size > found.searched
    assert found.total == found.lines == CHUNK_BYTES // len(line) + 1  # the last one cut
    whole = search_log(log, "loss")
    assert whole.searched == whole.size and whole.stopped_at is None
    assert whole.total == 3 * CHUNK_BYTES // len(line)
    rest = search_log(log, "loss", start=whole.size - 3 * len(line))  # going on from a byte
    assert rest.total == 3 and rest.matches[0].offset == whole.size - 3 * len(line)


def test_a_huge_log_without_a_newline_is_read_in_bounded_chunks_to_a_byte_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37 item 7: a sparse multi-GB log with no newline: the search reads at most the cap
    (AIR_LOG_SEARCH_MAX_MB), holds at most a chunk and a line's first 8 KB, and says the byte
    to go on from."""
    import tracemalloc

    from air_skills.runtime.results.log_search import MAX_SHOWN_CHARS, search_log

    log = tmp_path / "output.log"
    log.write_bytes(b"loss=1 ")
    os.truncate(log, 4 << 30)  # 4 GiB, sparse: one line, no newline
    monkeypatch.setenv("AIR_LOG_SEARCH_MAX_MB", "8")
    tracemalloc.start()
    try:
        found = search_log(log, "loss")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # a chunk (1 MiB) and a line's head, not the line
    assert found.stopped_by == "byte cap" and found.stopped_at == found.searched == 8 << 20
    assert found.size == 4 << 30 and found.total == 1 and found.matches[0].offset == 0
    assert len(found.matches[0].text) <= MAX_SHOWN_CHARS
    again = search_log(log, "loss", start=found.stopped_at)
    assert again.start == 8 << 20 and again.stopped_at == 16 << 20 and again.total == 0


def test_a_job_that_makes_its_log_a_sparse_giant_gets_a_search_that_says_where_it_stopped(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack itself: the job truncates its own output.log to 3 GiB with no newline;
    `air logs --grep` and MCP get_logs(grep=) answer with the byte to go on from."""
    from mcp_server.tools.logs import get_logs

    monkeypatch.setenv("AIR_LOG_SEARCH_MAX_MB", "16")
    code = "import os; os.write(1, b'loss=1 '); os.ftruncate(1, 3 << 30)"
    info = client.launch(JobSpec(command=[PY, "-c", code], track=False))
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    cap = 16 << 20
    done = _air("logs", info.job_id, "--grep", "loss")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1:loss=1 ")
    assert f"stopped at byte {cap} of " in done.stderr and f"--offset {cap}" in done.stderr
    reply = json.loads(_air("logs", info.job_id, "--grep", "loss", "--json").stdout)
    assert reply["stopped_at"] == cap and reply["stopped_by"] == "byte cap"
    assert reply["size"] >= 3 << 30
    on = json.loads(_air("logs", info.job_id, "--grep", "x", "--offset", str(cap), "--json").stdout)
    assert on["start"] == cap and on["stopped_at"] == 2 * cap
    tool = get_logs(client, info.job_id, grep="loss")
    assert tool.truncated and tool.next_offset == cap and tool.total_matches == 1
    assert f"stopped at byte {cap}" in (tool.more or "") and f"offset={cap}" in (tool.more or "")
    tool = get_logs(client, info.job_id, grep="loss", offset=cap)
    assert tool.offset == cap and tool.next_offset == 2 * cap and tool.total_matches == 0
