"""`air-mcp` over stdio, spawned as a real process: from a client config file, and raw JSON-RPC."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters

PY = sys.executable
pytestmark = pytest.mark.anyio


def desktop_config(path: Path, air_home: Path, air_mcp: list[str]) -> Path:
    """A claude_desktop_config.json-style file that points at `air-mcp`."""
    command, *args = air_mcp
    config = {
        "mcpServers": {
            "air": {
                "command": command,
                "args": args,
                "env": {
                    "AIR_HOME": str(air_home),
                    "AIR_SIMULATED_GPUS": "4",
                    "AIR_GRACE_S": "2",
                },
            }
        }
    }
    path.write_text(json.dumps(config, indent=2))
    return path


def params_from(config_file: Path, name: str = "air") -> StdioServerParameters:
    entry = json.loads(config_file.read_text())["mcpServers"][name]
    return StdioServerParameters(
        command=entry["command"], args=entry.get("args", []), env=entry.get("env")
    )


async def test_sdk_stdio_client_from_a_desktop_config(
    air_home: Path, tmp_path: Path, air_mcp: list[str]
) -> None:
    config = desktop_config(tmp_path / "claude_desktop_config.json", air_home, air_mcp)
    params = params_from(config)
    async with McpClient(params) as mcp:
        names = [t.name for t in (await mcp.list_tools()).tools]
        assert {"launch_job", "get_job", "wait_for_jobs", "cancel_job", "stop_study"} <= set(names)
        launched = await mcp.call_tool(
            "launch_job",
            {"command": [PY, "-c", "print('over stdio')"], "gpus": 1, "track": False},
        )
        job_id = launched.structured_content["job_id"]
        progress: list[float] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(done)

        waited = await mcp.call_tool(
            "wait_for_jobs", {"job_ids": [job_id], "timeout_s": 60}, progress_callback=on_progress
        )
        assert waited.structured_content["jobs"][0]["status"] == "SUCCEEDED"
        assert progress and progress[-1] == 1
        logs = await mcp.call_tool("get_logs", {"job_id": job_id})
        assert logs.structured_content["text"] == "over stdio\n"
        bad = await mcp.call_tool("get_job", {"job_id": "../../etc/passwd"})
        assert bad.is_error and bad.content[0].text.startswith("[not-found]")  # type: ignore[union-attr]
        huge = await mcp.call_tool("get_job", {"job_id": "x" * 10_000_000})  # one 10 MB line
        assert huge.is_error and "at most 200 characters" in huge.content[0].text  # type: ignore[union-attr]
        again = await mcp.call_tool("get_job", {"job_id": job_id})  # and the session goes on
        assert again.structured_content["status"] == "SUCCEEDED"


class RawSession:
    """JSON-RPC lines over a spawned server's pipes; every stdout line is kept for inspection."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: list[bytes] = []
        self.stderr: list[bytes] = []
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        self._next_id = 0
        self.eof = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)
        self.eof.set()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        while True:
            line = self._queue.get(timeout=60)
            assert line is not None, "server closed stdout"
            message = json.loads(line)
            if message.get("id") == self._next_id:
                return message


def test_stdout_carries_only_protocol_even_when_jobs_print(
    air_home: Path, air_mcp: list[str]
) -> None:
    """Logs go to stderr; jobs write to their log; a running job does not hold the pipe open."""
    proc = subprocess.Popen(
        [*air_mcp, "--log-level", "DEBUG"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )
    session = RawSession(proc)
    try:
        init = session.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        )
        assert init["result"]["serverInfo"]["name"] == "air-mcp"
        session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        noisy = "import sys; print('JOB-STDOUT-MARK'); print('JOB-STDERR-MARK', file=sys.stderr)"
        job = session.request(
            "tools/call",
            {"name": "launch_job", "arguments": {"command": [PY, "-c", noisy], "track": False}},
        )["result"]["structuredContent"]
        sleeper = session.request(
            "tools/call",
            {
                "name": "launch_job",
                "arguments": {
                    "command": [PY, "-c", "import time; time.sleep(300)"],
                    "track": False,
                },
            },
        )["result"]["structuredContent"]
        waited = session.request(
            "tools/call",
            {"name": "wait_for_jobs", "arguments": {"job_ids": [job["job_id"]], "timeout_s": 60}},
        )["result"]
        assert waited["structuredContent"]["jobs"][0]["status"] == "SUCCEEDED"
        logs = session.request(
            "tools/call", {"name": "get_logs", "arguments": {"job_id": job["job_id"]}}
        )["result"]["structuredContent"]["text"]
        assert "JOB-STDOUT-MARK" in logs and "JOB-STDERR-MARK" in logs
        assert sleeper["status"] in ("QUEUED", "RUNNING")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # end of input: the server exits, though the sleeper still runs
        returncode = proc.wait(timeout=60)
    assert returncode == 0, b"".join(session.stderr).decode()[-2000:]
    assert session.eof.wait(timeout=30), "something still holds the server's stdout open"
    assert session.lines, "no output"
    for line in session.lines:  # every stdout line is one JSON-RPC message
        assert json.loads(line)["jsonrpc"] == "2.0", line[:200]


def test_stdin_that_is_not_a_pipe_is_served_by_the_sdk_transport(
    air_home: Path, tmp_path: Path, air_mcp: list[str]
) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}) + "\n")
    with requests.open("rb") as stdin:
        proc = subprocess.run(
            air_mcp, stdin=stdin, capture_output=True, env=dict(os.environ), timeout=60
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {"jsonrpc": "2.0", "id": 7, "result": {}}
