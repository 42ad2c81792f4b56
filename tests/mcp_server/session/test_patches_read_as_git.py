"""39.4: patches read as git and patch read them, over `air-mcp` on stdio: a `c/` prefix
(`diff -u a/x c/x`) edits train.py, a --no-prefix diff is -p0, a header both readings fit is
refused naming both, a patch that deletes or renames the script is refused before queueing,
and a dry run names the interpreter's absolute path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp_calls import ok, refused

from air_skills.runtime.code.patch import apply_patch

pytestmark = pytest.mark.anyio
PY = sys.executable
TRAIN = 'print("---")\nprint("val_mse: 0.5")\n'


def _tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / "src" / "train.py").write_text(TRAIN)
    return root


def _edit(
    old: str, new: str, frm: str = 'print("val_mse: 0.5")', to: str = 'print("val_mse: 0.25")'
) -> str:
    return f'--- {old}\n+++ {new}\n@@ -1,2 +1,2 @@\n print("---")\n-{frm}\n+{to}\n'


def _read(root: Path):
    return lambda path: (root / path).read_bytes() if (root / path).is_file() else None


@pytest.mark.parametrize(
    ("old", "new", "edited"),
    [
        ("a/train.py", "b/train.py", "train.py"),
        ("a/train.py", "c/train.py", "train.py"),  # diff -u a/train.py c/train.py
        ("i/train.py", "w/train.py", "train.py"),  # git's mnemonic prefixes
        ("src/train.py", "src/train.py", "src/train.py"),  # git diff --no-prefix: -p0
        ("a/src/train.py", "b/src/train.py", "src/train.py"),
    ],
)
def test_headers_read_as_git_apply_reads_them(
    tmp_path: Path, old: str, new: str, edited: str
) -> None:
    root = _tree(tmp_path)
    assert set(apply_patch(_edit(old, new), _read(root))) == {edited}


def test_a_header_both_readings_fit_is_refused_naming_both(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "a").mkdir()
    (root / "a" / "train.py").write_text(TRAIN)  # a/train.py is a file too: which one?
    with pytest.raises(Exception, match=r"train.py \(the prefix stripped, -p1\) and a/train.py"):
        apply_patch(_edit("a/train.py", "b/train.py"), _read(root))


async def test_patches_over_stdio(stdio: StdioServerParameters, tmp_path: Path) -> None:
    root = _tree(tmp_path / "w")
    spec = {"command": [PY, "train.py"], "workdir": str(root), "track": False}
    rename = _edit("a/train.py", "b/train2.py")
    delete = (
        '--- a/train.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-print("---")\n-print("val_mse: 0.5")\n'
    )
    async with McpClient(stdio) as mcp:
        # the c/ patch of the agent's session edits train.py: the job prints the patched value
        launched, _ = await ok(mcp, "launch_job", **spec, patch=_edit("a/train.py", "c/train.py"))
        waited, _ = await ok(mcp, "wait_for_jobs", job_ids=[launched["job_id"]], timeout_s=120)
        assert waited["jobs"][0]["status"] == "SUCCEEDED"
        logs, _ = await ok(mcp, "get_logs", job_id=launched["job_id"])
        assert "val_mse: 0.25" in logs["text"]
        # renaming or deleting the command's script: refused before anything is queued
        text = await refused(mcp, "launch_job", **spec, patch=rename)
        assert "train.py: the patch renames it to train2.py" in text
        text = await refused(mcp, "launch_jobs", jobs=[{**spec, "patch": delete}], seeds=[0, 1])
        assert "train.py: the patch deletes it" in text and "nothing was launched" in text
        listed, _ = await ok(mcp, "list_jobs")
        assert len(listed["items"]) == 1
        # a dry run names the interpreter it resolved
        python = os.path.realpath(PY)
        dry, text = await ok(mcp, "launch_job", **{**spec, "command": ["python3", "train.py"]},
                             dry_run=True)  # fmt: skip
        assert "python3 is /" in dry["message"]
        dry, text = await ok(mcp, "launch_job", **spec, dry_run=True)
        assert f"is {python}" in dry["message"] or f"is {PY}" in dry["message"]
