"""MCP launch_job with a patch the tree cannot hold (issue 30): `[invalid-spec]` naming the
file, never `[internal-error]` (a file through an in-tree folder symlink, a file where the
snapshot has a folder, or a tree with a file name that is not UTF-8)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient

PY = sys.executable
pytestmark = pytest.mark.anyio


def tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    os.symlink("pkg", root / "lnk")
    return root


@pytest.mark.parametrize(
    ("path", "words"),
    [("lnk/new.py", "lnk is a symlink in the snapshot"), ("pkg", "pkg is a folder")],
)
async def test_launch_job_refuses_a_patch_the_tree_cannot_hold(
    server, tmp_path: Path, path: str, words: str
) -> None:
    root = tree(tmp_path / "tree")
    patch = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+Y = 2\n"
    async with McpClient(server) as mcp:
        args = {"command": [PY, "-c", "pass"], "workdir": str(root), "patch": patch}
        result = await mcp.call_tool("launch_job", args)
        assert result.is_error, result
        text = result.content[0].text  # type: ignore[union-attr]
        assert text.startswith("[invalid-spec]") and words in text, text


async def test_launch_job_from_a_tree_with_a_name_that_is_not_utf8(server, tmp_path: Path) -> None:
    root = tree(tmp_path / "tree")
    with open(os.path.join(os.fsencode(root), b"bad\xff.py"), "w") as f:
        f.write("Z = 1\n")
    async with McpClient(server) as mcp:
        args = {"command": [PY, "-c", "pass"], "workdir": str(root)}
        result = await mcp.call_tool("launch_job", args)
        assert result.is_error, result
        text = result.content[0].text  # type: ignore[union-attr]
        assert text.startswith("[invalid-spec]") and "bad\\xff.py" in text, text
