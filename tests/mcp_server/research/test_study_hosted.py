"""Studies started over MCP while the home's study host runs (`autoresearch host run`) run as
threads of that host, not as processes of their own; with `AIR_STUDY_HOST=off`, or with no
host running, each is a process of its own as before.

Real processes throughout: the host is `autoresearch host run` started as a subprocess on the
test's home (its default folder, AIR_HOME/host), the MCP server is the real one (in-process
client), the trials are tiny `python -S -c` jobs on simulated GPUs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from mcp import Client as McpClient

from autoresearch.journal.journal import Journal, replay
from autoresearch.study.host_folder import host_alive, host_dir

pytestmark = pytest.mark.anyio
LOSS = (
    "import json,os; c=json.load(open(os.environ['AIR_CONFIG_FILE']));"
    " print('---'); print('loss:', (c['x']-0.3)**2)"
)


def study(name: str, trials: int, workdir: Path) -> dict[str, Any]:
    return {
        "name": name,
        "command": [sys.executable, "-S", "-c", LOSS],
        "workdir": str(workdir),
        "base_config": {"x": 0.0},
        "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": trials, "concurrency": 1},
        "noise": {"repeats": 0},
        "gpus_per_trial": 1,
        "proposer": "random",
        "sandbox": "off",
        "early_stopping": {"type": "none"},
    }


def loops_of(folders: list[Path]) -> list[int]:
    """Pids of the processes whose command line names one of the study folders (the
    `autoresearch run <folder>/.start.yaml --dir <folder>` of a study started as a process)."""
    names = [str(f) for f in folders]
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(arg.startswith(n) for arg in cmd for n in names):
            pids.append(int(entry))
    return pids


def ended(folder: Path) -> bool:
    return replay(Journal(folder).read()).stopped is not None


def sessions(folder: Path) -> list[int]:
    return [e["pid"] for e in Journal(folder).read() if e["event"] == "session_started"]


@pytest.mark.slow
@pytest.mark.timeout(600)  # a bound, not a measure
async def test_start_study_hands_studies_to_the_running_host_else_a_process(
    tracked: str, server: Any, air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")
    monkeypatch.delenv("AIR_STUDY_HOST", raising=False)
    workdir = tmp_path / "wd"
    workdir.mkdir()
    log = tmp_path / "host.out"
    with open(log, "ab") as out:  # the default host folder: what start_study looks for
        host = subprocess.Popen(
            [sys.executable, "-m", "autoresearch.cli", "host", "run"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: host_alive(host_dir()), timeout_s=120, every_s=0.1)
        async with McpClient(server) as mcp:
            replies = []
            for name in ("h1", "h2", "h3"):
                reply = await mcp.call_tool("start_study", {"study": study(name, 2, workdir)})
                assert not reply.is_error, reply.content[0].text
                replies.append(reply.structured_content)
            folders = [Path(r["study_dir"]) for r in replies]
            for r in replies:
                # the host runs it: its reply says so, and the loop's pid is the host's
                assert r["hosted_by"] == {"pid": host.pid, "host_dir": str(host_dir())}, r
            assert loops_of(folders) == []  # no `autoresearch run` process of their own

            # opted out while the host runs: a process of its own, as before
            monkeypatch.setenv("AIR_STUDY_HOST", "off")
            own = await mcp.call_tool("start_study", {"study": study("own", 1, workdir)})
            assert not own.is_error, own.content[0].text
            own_reply = own.structured_content
            assert "hosted_by" not in own_reply and own_reply["pid"] != host.pid
            own_dir = Path(own_reply["study_dir"])
            monkeypatch.delenv("AIR_STUDY_HOST")

            wait_until(lambda: all(map(ended, folders)) and ended(own_dir), timeout_s=300,
                       every_s=0.2)  # fmt: skip
            for folder in folders:
                events = Journal(folder).read()
                launched = [e for e in events if e["event"] == "launched"]
                assert len(launched) == 2, events  # each journal gets its own trials
                assert replay(events).stopped["reason"] == "budget:trials"  # type: ignore[index]
                assert sessions(folder) == [host.pid]  # one session, in the host
            assert sessions(own_dir) == [own_reply["pid"]]
            assert len({e["job_id"] for f in folders for e in Journal(f).read()
                        if e["event"] == "launched"}) == 6  # fmt: skip
            assert host.poll() is None
    finally:
        host.send_signal(signal.SIGTERM)
        code = host.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]

    # no host runs now: start_study starts a process of its own, as before
    wait_until(lambda: host_alive(host_dir()) is None, timeout_s=30)
    async with McpClient(server) as mcp:
        alone = await mcp.call_tool("start_study", {"study": study("alone", 1, workdir)})
        assert not alone.is_error, alone.content[0].text
        reply = alone.structured_content
    folder = Path(reply["study_dir"])
    assert "hosted_by" not in reply and reply["pid"] != host.pid
    wait_until(lambda: ended(folder), timeout_s=180, every_s=0.2)
    assert sessions(folder) == [reply["pid"]]
    assert len([e for e in Journal(folder).read() if e["event"] == "launched"]) == 1
