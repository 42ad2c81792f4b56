"""Text that comes from a job (names, messages, log lines, config values, error text) is
printed as it is by every `air` command: never read as rich markup, which crashed on `[/x]`
and swallowed `[nan]`. Real `air` processes, as the break was seen from the shell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")

NAMES = ["[/x]", "[nan]", "[bold]x[/bold]", ":fire:"]


def air(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    """`air ARGS` on a wide terminal (no cut cells); asserts the exit code, no traceback."""
    env = {**os.environ, "COLUMNS": "300"}
    proc = subprocess.run([AIR, *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == code, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def launch(*args: str) -> str:
    return json.loads(air("launch", "--json", *args).stdout)["job_id"]


@pytest.mark.slow
def test_job_names_shown_as_given_by_ls_status_wait(air_home: Path) -> None:
    jobs = {name: launch("--name", name, "--gpus", "1", "--", "sleep", "60") for name in NAMES}
    wait_until(
        lambda: all(j["status"] == "RUNNING" for j in json.loads(air("ls", "--json").stdout))
    )
    listed = air("ls").stdout
    held = air("gpus").stdout
    for name, job in jobs.items():
        assert name in listed
        assert name in air("status", job).stdout
        assert job in held  # each GPU's row names the job holding it
    air("cancel", "--all")
    waited = air("wait", *jobs.values(), "--all").stdout
    assert [line.split()[:2] for line in waited.splitlines()] == [
        [job, "CANCELLED"] for job in jobs.values()
    ]


@pytest.mark.slow
def test_log_lines_messages_and_config_values_shown_as_given(air_home: Path) -> None:
    script = "import sys; print('[/data/shard-0] loaded'); sys.exit('[/x] bad [nan] shard')"
    failing = launch("--name", "[/x]", "--set", 'tag="[/x]"', "--", "python", "-c", script)
    other = launch("--set", 'tag="[nan]"', "--", "true")
    done = air("wait", failing, other, "--all").stdout
    assert "FAILED" in done and "SUCCEEDED" in done
    assert "[/data/shard-0] loaded" in air("logs", failing).stdout
    assert "[/x] bad [nan] shard" in air("logs", failing).stdout
    # The follow path prints the end line (with its message) on stderr.
    assert "FAILED" in air("logs", failing, "--follow").stderr
    diff = air("compare", other, failing).stdout
    assert '"[/x]"' in diff
    table = air("metrics", failing).stdout
    assert failing in table


def test_cordon_reasons_shown_as_given(air_home: Path) -> None:
    cordoned = air("cordon", "3", "--reason", "[/x] fan [nan]").stdout
    assert "GPU 3 cordoned: [/x] fan [nan]" in cordoned
    assert "[/x] fan [nan]" in air("gpus").stdout
    air("uncordon", "3")


def test_error_text_shown_as_given(air_home: Path) -> None:
    result = air("status", "[/x]", code=2)
    assert result.stderr.startswith("[not-found] no job '[/x]'")
    result = air("launch", "--name", "[/x]", "--gpus", "99", "--", "true", code=2)
    assert result.stderr.startswith("[insufficient-gpus] ")
