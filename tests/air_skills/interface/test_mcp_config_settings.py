"""`air mcp-config` carries the shell's non-secret AIR_* settings into the client's config and
says which (issue 38.8); never AIR_MCP_TOKEN. list_gpus with no GPUs says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from air_skills.cli.app import app


def test_mcp_config_carries_the_shells_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {
        "AIR_HOME": str(tmp_path / "air"),
        "AIR_SIMULATED_GPUS": "2",
        "AIR_DATA_ROOTS": str(tmp_path / "data"),
        "AIR_MCP_TOKEN": "secret-token-value",
    }
    result = CliRunner().invoke(app, ["mcp-config", "cursor"], env=env)
    assert result.exit_code == 0, result.output
    text = result.stdout
    entry = json.loads(text[: text.rindex("}") + 1])["mcpServers"]["air"]
    assert entry["env"]["AIR_SIMULATED_GPUS"] == "2"
    assert entry["env"]["AIR_DATA_ROOTS"] == env["AIR_DATA_ROOTS"]
    assert "AIR_MCP_TOKEN" not in entry["env"] and "secret-token-value" not in result.output
    assert "carried from this shell:" in result.output and "AIR_SIMULATED_GPUS" in result.output
