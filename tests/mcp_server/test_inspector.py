"""Interop with a client that is not ours: the MCP Inspector CLI, from a desktop-style config."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"
PY = sys.executable

pytestmark = [
    pytest.mark.slow,  # npx starts the Inspector (node) for every call
    pytest.mark.skipif(
        shutil.which("npx") is None, reason="npx (npm) is not installed: CI must have it"
    ),
]


def inspector(config: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["npx", "-y", INSPECTOR, "--cli", "--config", str(config), "--server", "air", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return json.loads(proc.stdout)


def call(config: Path, tool: str, **args: str) -> dict[str, Any]:
    """tools/call: the Inspector sends every argument as a string (JSON for lists)."""
    pairs = [f"{k}={v}" for k, v in args.items()]
    result = inspector(config, "--method", "tools/call", "--tool-name", tool, "--tool-arg", *pairs)
    assert not result.get("isError"), result
    return result["structuredContent"]


def test_inspector_lists_tools_launches_and_reads_a_job(
    air_home: Path, tmp_path: Path, air_mcp: list[str]
) -> None:
    command, *args = air_mcp
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "air": {
                        "command": command,
                        "args": args,
                        "env": {"AIR_HOME": str(air_home), "AIR_SIMULATED_GPUS": "4"},
                    }
                }
            }
        )
    )
    listed = inspector(config, "--method", "tools/list")
    tools = {t["name"]: t for t in listed["tools"]}
    assert {"launch_job", "get_job", "get_logs", "wait_for_jobs", "cancel_job"} <= set(tools)
    assert tools["get_job"]["annotations"]["readOnlyHint"] is True
    assert tools["cancel_job"]["annotations"]["destructiveHint"] is True

    argv = json.dumps([PY, "-c", "print('hello from the inspector')"])
    job = call(config, "launch_job", command=argv, gpus="1", track="false")
    assert job["job_id"].startswith("job-") and job["gpus"] == [0]
    waited = call(config, "wait_for_jobs", job_ids=json.dumps([job["job_id"]]), timeout_s="60")
    info = waited["jobs"][0]  # the job as get_job returns it
    assert info["job_id"] == job["job_id"] and info["status"] == "SUCCEEDED"
    assert info["exit_code"] == 0
    logs = call(config, "get_logs", job_id=job["job_id"])
    assert logs["text"] == "hello from the inspector\n"
