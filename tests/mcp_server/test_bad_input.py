"""Odd input reaches the tools as a clean ``[invalid-input]``, never an ``[internal-error]``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from mcp import Client as McpClient

PY = sys.executable
pytestmark = pytest.mark.anyio


async def error_text(mcp: McpClient, tool: str, args: dict[str, object]) -> str:
    result = await mcp.call_tool(tool, args)
    assert result.is_error, result
    return result.content[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize("cursor", ["9" * 40, "9" * 19, "²", "١٢", "12\n", " 1", "-1", ""])
async def test_list_jobs_refuses_a_cursor_it_never_gave(server, cursor: str) -> None:
    async with McpClient(server) as mcp:
        text = await error_text(mcp, "list_jobs", {"cursor": cursor})
        assert text.startswith("[invalid-input] bad cursor"), text
        page = await mcp.call_tool("list_jobs", {"cursor": "9" * 18})
        assert not page.is_error  # the largest cursor it could give is still fine


def write_study(folder: Path) -> None:
    folder.mkdir(parents=True)
    study = {
        "name": "bytes",
        "command": [PY, "-c", "print(1)"],
        "workdir": str(folder),
        "base_config": {"x": 0.0},
        "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 1},
        "gpus_per_trial": 0,
        "proposer": "random",
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(study))


async def test_get_study_on_a_journal_that_is_not_utf8_is_invalid_input(
    server, tmp_path: Path
) -> None:
    folder = tmp_path / "study"
    write_study(folder)
    (folder / "journal.jsonl").write_bytes(b'{"event": "\xff\xfe"}\n')
    async with McpClient(server) as mcp:
        result = await mcp.call_tool("get_study", {"study": str(folder)})
    if result.is_error:  # refused as the caller's input (or skipped, once the reader does so)
        text = result.content[0].text  # type: ignore[union-attr]
        assert text.startswith(("[invalid-input]", "[not-found]")), text
        assert "\nNext: " in text


async def test_a_study_file_that_is_not_utf8_is_invalid_input(server, tmp_path: Path) -> None:
    bad = tmp_path / "study.yaml"
    bad.write_bytes(b"name: \xff\n")
    async with McpClient(server) as mcp:
        text = await error_text(mcp, "suggest_trials", {"study": str(bad)})
        assert text.startswith(("[invalid-input]", "[invalid-spec]")), text
