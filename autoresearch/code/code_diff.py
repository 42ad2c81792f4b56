"""Unified diffs made and summarised in pure Python, in the form ``runtime/code/patch.py``
applies."""

from __future__ import annotations

import difflib
from typing import Any

from air_skills.errors import InvalidSpec
from air_skills.runtime.code.patch import parse_patch

NO_NEWLINE = "\\ No newline at end of file\n"


def _text(data: bytes | None, path: str) -> list[str]:
    if data is None:
        return []
    if b"\x00" in data:
        raise ValueError(f"{path} is binary")
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None


def unified_diff(path: str, before: bytes | None, after: bytes | None) -> str:
    """``git diff``-style text from ``before`` to ``after`` (None: the file does not exist).
    Raises ValueError for a binary or non-UTF-8 side."""
    a, b = _text(before, path), _text(after, path)
    old = f"a/{path}" if before is not None else "/dev/null"
    new = f"b/{path}" if after is not None else "/dev/null"
    out = []
    for line in difflib.unified_diff(a, b, old, new, n=3):
        if line.startswith(("---", "+++")):
            line = line.rstrip("\n") + "\n"  # difflib may add a trailing tab
            line = line.replace("\t\n", "\n")
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n" + NO_NEWLINE)
    return "".join(out)


def summarize(patch: str | None) -> dict[str, Any] | None:
    """``{"files": {path: [added, removed]}, "added": n, "removed": n}`` of a patch."""
    if not patch:
        return None
    try:
        files = parse_patch(patch)
    except InvalidSpec:
        return None
    out: dict[str, list[int]] = {}
    for fp in files:
        counts = out.setdefault(fp.name, [0, 0])
        for hunk in fp.hunks:
            counts[0] += sum(1 for op, _ in hunk.lines if op == "+")
            counts[1] += sum(1 for op, _ in hunk.lines if op == "-")
    return {
        "files": out,
        "added": sum(a for a, _ in out.values()),
        "removed": sum(r for _, r in out.values()),
    }


def summary_text(summary: dict[str, Any] | None) -> str:
    """``train.py +3/-1, model.py +2/-0`` (empty for no patch)."""
    if not summary:
        return ""
    return ", ".join(f"{p} +{a}/-{r}" for p, (a, r) in summary["files"].items())


def touched_lines(patch: str) -> dict[str, list[tuple[int, int]]]:
    """The line ranges (first, last; 1-based, in the old file) each file's hunks touch."""
    try:
        files = parse_patch(patch)
    except InvalidSpec:
        return {}
    out: dict[str, list[tuple[int, int]]] = {}
    for fp in files:
        for hunk in fp.hunks:
            start = max(hunk.old_start, 1)
            out.setdefault(fp.name, []).append((start, start + max(hunk.old_len, 1) - 1))
    return out
