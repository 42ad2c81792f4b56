"""Issue 39's tests talk to a real `air-mcp` over stdio through the MCP SDK's client."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp import StdioServerParameters


@pytest.fixture
def stdio(air_home: Path, tracked: str, air_mcp: list[str]) -> StdioServerParameters:
    """`air-mcp` over stdio on this test's AIR_HOME and MLflow store."""
    command, *args = air_mcp
    env = {k: v for k, v in os.environ.items() if k.startswith(("AIR_", "MLFLOW_", "PATH"))}
    return StdioServerParameters(command=command, args=args, env=env)
