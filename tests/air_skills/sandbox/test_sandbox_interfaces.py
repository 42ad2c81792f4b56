"""Issue 25: the sandbox through each interface: `air launch --sandbox/--no-network/--writable`
(JSON out) and MCP launch_job(sandbox=), both over the one Client."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from air_skills import Client, JobStatus
from air_skills.cli.app import app
from air_skills.runtime.execution import sandbox
from mcp_server import tools

PY = sys.executable
pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")


def test_air_launch_takes_sandbox_no_network_and_writable(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "roots" / "out"
    out.mkdir(parents=True)
    monkeypatch.setenv("AIR_DATA_ROOTS", str(tmp_path / "roots"))
    write = f"open({str(out / 'r.txt')!r}, 'w').write('ok')"
    argv = ["launch", "--json", "--sandbox", "on", "--no-network", "--writable", str(out)]
    result = CliRunner().invoke(app, [*argv, "--", PY, "-c", write])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["sandbox"] == "bwrap, no network"
    assert client.wait([info["job_id"]], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    assert (out / "r.txt").read_text() == "ok"
    bad = CliRunner().invoke(app, ["launch", "--json", "--sandbox", "maybe", "--", "true"])
    assert bad.exit_code == 2 and "sandbox" in bad.output


def test_mcp_launch_job_takes_sandbox(client: Client, tmp_path: Path) -> None:
    off = tools.launch_job(client, [PY, "-c", "pass"], track=False, sandbox="off")
    on = tools.launch_job(client, [PY, "-c", "pass"], track=False, sandbox="on")
    assert off.sandbox == "none (sandbox: off)" and on.sandbox == "bwrap"
    done = client.wait([off.job_id, on.job_id], timeout_s=60, any=False)
    assert [d.status for d in done] == [JobStatus.SUCCEEDED] * 2


def test_an_interpreter_under_tmp_is_seen_inside_the_sandbox(client, tmp_path) -> None:
    """/tmp is private in the sandbox: a job whose Python lives in a virtual environment under
    /tmp (a CI checkout's .venv) still starts, with that environment's packages."""
    import subprocess
    import sys

    from air_skills.runtime.execution import sandbox

    if sandbox.unavailable():
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    python = str(venv / "bin" / "python")
    code = "import sys; print('prefix', sys.prefix)"
    info = client.launch({"command": [python, "-c", code], "track": False, "sandbox": "on"})
    (done,) = client.wait([info.job_id], timeout_s=120)
    log = client.logs(info.job_id).text
    assert done.status.value == "SUCCEEDED", (done.message, log)
    assert f"prefix {venv}" in log
