"""The CLI's code-snapshot parts: reading ``--patch`` and the snapshot line of ``air status``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidInput, InvalidSpec

MAX_PATCH_BYTES = 4 << 20  # a patch of code is far smaller; this bounds what a mistake reads


def read_patch(source: str) -> str:
    """The text of ``--patch``: a file, or stdin for ``-`` (at most MAX_PATCH_BYTES)."""
    if source == "-":
        text = sys.stdin.read(MAX_PATCH_BYTES + 1)
        if len(text) > MAX_PATCH_BYTES:
            raise InvalidInput("the patch on stdin is over 4 MiB", hint="give a smaller patch")
        return text
    path = Path(source)
    if not path.is_file():
        raise InvalidInput(f"--patch {source}: no such file", hint="give a unified diff file")
    with open(path, "rb") as f:
        data = f.read(MAX_PATCH_BYTES + 1)
    if len(data) > MAX_PATCH_BYTES:
        raise InvalidInput(f"{path} is over 4 MiB", hint="a patch of code is far smaller")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSpec(
            f"patch refused, nothing was launched: {path} is not UTF-8 text (binary?)",
            hint="make the patch with `git diff` from the tree's root (relative paths, text files)",
        ) from None


def code_line(code: Any) -> str:
    """The snapshot in one line: digest, commit and branch, dirty, patched, files."""
    parts = [f"digest {code.digest[:12]}"]
    if code.commit:
        parts.append(f"commit {code.commit[:12]}" + (f" ({code.branch})" if code.branch else ""))
    parts.append("dirty" if code.dirty else "clean")
    if code.patched:
        parts.append("patched")
    parts.append(f"{code.files} files")
    return ", ".join(parts) + (f"; {code.note}" if code.note else "")
