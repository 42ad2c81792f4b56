"""Issue 30: a config nested past any sane depth, a number JSON cannot write (NaN, Infinity)
and two keys JSON writes the same ("1" and 1) are refused as `[invalid-spec]`, from the CLI
(real `air` processes), the Python API and MCP `launch_job`, before anything is created."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient

from air_skills.errors import InvalidSpec
from air_skills.models import JobSpec

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
DEEP = "[" * 3000 + "]" * 3000


def deep_list(levels: int) -> list[Any]:
    top: list[Any] = []
    inner = top
    for _ in range(levels):
        inner.append([])
        inner = inner[0]
    return top


def air(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AIR, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def nothing_created(home: Path) -> bool:
    return not (home / "jobs").exists() or os.listdir(home / "jobs") == []


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (DEEP, "nested too deeply"),
        (".nan", "config.d = nan is not a finite number"),
        ("-.inf", "config.d = -inf is not a finite number"),
        ("[1, .inf]", "config.d[1] = inf is not a finite number"),
        ("{1: a, '1': b}", "config.d has two keys that JSON writes as '1'"),
        ("{true: a, 'true': b}", "config.d has two keys that JSON writes as 'true'"),
        ("{.nan: a}", "is not a finite number"),
    ],
)
def test_set_value_json_cannot_write_is_invalid_spec(
    air_home: Path, tmp_path: Path, value: str, said: str
) -> None:
    proc = air("launch", "--code", "live", "--set", f"d={value}", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("[invalid-spec] "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert said in proc.stderr
    assert "Next:" in proc.stderr
    assert nothing_created(air_home)


def test_spec_file_with_a_deep_config_is_invalid_spec(air_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"command: [true]\ncode: live\nconfig: {{d: {DEEP}}}\n")
    proc = air("launch", str(spec), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"[invalid-spec] {spec} is nested too deeply"), proc.stderr
    assert nothing_created(air_home)


@pytest.mark.parametrize(
    "config",
    [
        {"d": deep_list(3000)},
        {"d": float("nan")},
        {"d": {"x": [float("inf")]}},
        {"d": {1: "a", "1": "b"}},
    ],
)
def test_python_api_refuses_what_json_cannot_write(client, air_home: Path, config) -> None:
    with pytest.raises(InvalidSpec) as caught:
        client.launch({"command": ["true"], "code": "live", "config": config})
    assert caught.value.code == "invalid-spec"
    assert caught.value.problems and caught.value.problems[0].startswith("config: ")
    assert nothing_created(air_home)


def test_json_keys_that_stay_distinct_are_kept() -> None:
    config = {"d": {1: "a", "2": "b", 1.5: "c", "k": [1, 2.5, None, True]}, "e": deep_list(150)}
    assert JobSpec.parse({"command": ["true"], "config": config}).config == config


def test_mcp_tool_refuses_nan_and_duplicate_keys(client, air_home: Path, tmp_path: Path) -> None:
    """The MCP client writes NaN as null; a raw JSON-RPC peer can send it: the plain tool."""
    from mcp_server.tools.jobs import launch_job

    for config in ({"d": {"x": [float("nan")]}}, {"d": {1: "a", "1": "b"}}, {"d": deep_list(3000)}):
        with pytest.raises(InvalidSpec, match=r"invalid job spec: config: config"):
            launch_job(client, ["true"], workdir=str(tmp_path), code="live", config=config)
    assert nothing_created(air_home)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_launch_job_refuses_a_deep_config(
    air_home: Path, tmp_path: Path, anyio_backend: str
) -> None:
    from mcp_server.server import build_server

    # 240 levels: past the config's limit, within what the MCP client will serialise
    async with McpClient(build_server()) as mcp:
        result = await mcp.call_tool(
            "launch_job",
            {
                "command": ["true"],
                "workdir": str(tmp_path),
                "code": "live",
                "config": {"d": deep_list(240)},
            },
        )
    assert result.is_error, result
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith(
        "[invalid-spec] invalid job spec: config: config is too large or too deep"
    )
    assert nothing_created(air_home)
