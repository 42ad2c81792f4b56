"""A unified-diff checker and applier in pure Python (``patch``/``git apply`` may be missing).

``apply_patch(text, read)`` parses a unified diff (``git diff`` or ``diff -u`` output, ``a/``
``b/`` prefixes stripped), checks it (text only, not empty, every path relative and inside the
tree) and applies it in memory to the files that ``read(path)`` returns, without fuzz: a hunk's
context must match exactly, at its line number or shifted (as ``git apply`` allows). It
returns ``{path: new bytes, or None for a deleted file}``; nothing is written. Every problem is
an ``InvalidSpec`` naming the file and the hunk. Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from air_skills.errors import InvalidSpec

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_HINT = "make the patch with `git diff` from the tree's root (relative paths, text files)"


@dataclass
class Hunk:
    header: str
    old_start: int
    new_start: int
    old_len: int
    new_len: int
    lines: list[tuple[str, str]] = field(default_factory=list)  # (" "|"-"|"+", text)

    def old(self) -> list[str]:
        return [t for op, t in self.lines if op != "+"]

    def new(self) -> list[str]:
        return [t for op, t in self.lines if op != "-"]


@dataclass
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.new_path or self.old_path or "?"


def _error(message: str, **details: object) -> InvalidSpec:
    return InvalidSpec(f"patch refused, nothing was launched: {message}", hint=_HINT, **details)


def _header_path(line: str, prefix: str) -> str | None:
    raw = line[4:].rstrip("\r\n")
    if "\t" in raw:  # diff -u appends a tab and a timestamp
        raw = raw.split("\t", 1)[0]
    if raw.startswith('"') and raw.endswith('"'):
        raw = raw[1:-1]
    if raw == "/dev/null":
        return None
    if raw.startswith(prefix):
        raw = raw[len(prefix) :]
    return check_path(raw)


def check_path(path: str) -> str:
    """``path`` normalised, or an error when it is absolute or leaves the tree."""
    if not path or "\x00" in path:
        raise _error(f"a file path is empty or holds a NUL byte ({path!r})")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("\\") or re.match(r"^[A-Za-z]:", path):
        raise _error(f"{path}: an absolute path; a patch may only change files in the tree")
    if ".." in pure.parts:
        raise _error(f"{path}: the path leaves the tree (..); a patch stays inside it")
    parts = [p for p in pure.parts if p != "."]
    if not parts:
        raise _error(f"{path!r} is not a file path")
    if parts[0] == ".git":
        raise _error(f"{path}: a patch may not change git's own folder")
    return "/".join(parts)


def parse_patch(text: str) -> list[FilePatch]:
    """The file patches of a unified diff (see the module docstring)."""
    if "\x00" in text:
        raise _error("the patch holds NUL bytes: it is binary, and only text patches apply")
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("GIT binary patch") or (
            line.startswith("Binary files ") and line.rstrip().endswith(" differ")
        ):
            raise _error(f"binary change ({line.strip()}): only text patches apply")
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp = FilePatch(_header_path(line, "a/"), _header_path(lines[i + 1], "b/"))
            if fp.old_path is None and fp.new_path is None:
                raise _error("a file patch is from /dev/null to /dev/null")
            files.append(fp)
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not files:
                raise _error(f"a hunk ({line.strip()}) comes before any ---/+++ file header")
            i = _read_hunk(lines, i, match, files[-1])
            continue
        i += 1
    if not files:
        raise _error("the patch is empty (no ---/+++ file headers and @@ hunks)")
    for fp in files:
        if not fp.hunks:
            raise _error(f"{fp.name}: a file header with no hunk (renames and mode changes alone"
                         " are not supported)", file=fp.name)  # fmt: skip
    return files


def _read_hunk(lines: list[str], i: int, match: re.Match[str], fp: FilePatch) -> int:
    a, b, c, d = match.groups()
    hunk = Hunk(
        lines[i].strip(),
        int(a),
        int(c),
        1 if b is None else int(b),
        1 if d is None else int(d),
    )
    fp.hunks.append(hunk)
    old_left, new_left = hunk.old_len, hunk.new_len
    i += 1
    while i < len(lines) and (old_left > 0 or new_left > 0):
        line = lines[i]
        op, body = (" ", line) if line in ("\n", "\r\n") else (line[:1], line[1:])
        if op == "\\":  # "\ No newline at end of file": the line before has no newline
            _strip_newline(hunk)
            i += 1
            continue
        if op not in (" ", "-", "+"):
            break
        hunk.lines.append((op, body))
        old_left -= op != "+"
        new_left -= op != "-"
        i += 1
    if old_left or new_left:
        raise _error(
            f"{fp.name}, hunk {len(fp.hunks)} ({hunk.header}): the hunk is cut short (its"
            " line counts do not match its lines)",
            file=fp.name,
            hunk=len(fp.hunks),
        )
    if i < len(lines) and lines[i].startswith("\\"):
        _strip_newline(hunk)
        i += 1
    return i


def _strip_newline(hunk: Hunk) -> None:
    if hunk.lines:
        op, body = hunk.lines[-1]
        hunk.lines[-1] = (op, body[:-2] if body.endswith("\r\n") else body.rstrip("\n"))


def _find(content: list[str], old: list[str], expected: int, start: int) -> int | None:
    """Where ``old`` occurs in ``content`` at or after ``start``: nearest to ``expected``."""
    n = len(old)
    if not n:
        return min(max(expected, start), len(content))
    for pos in sorted(range(start, len(content) - n + 1), key=lambda p: (abs(p - expected), p)):
        if content[pos : pos + n] == old:
            return pos
    return None


def _apply_file(fp: FilePatch, content: list[str]) -> list[str]:
    out = list(content)
    offset = 0
    floor = 0
    for number, hunk in enumerate(fp.hunks, 1):
        old = hunk.old()
        expected = max(hunk.old_start - 1, 0) + offset if hunk.old_len else hunk.old_start + offset
        pos = _find(out, old, expected, floor)
        if pos is None:
            raise _error(
                f"{fp.name}, hunk {number} ({hunk.header}) does not apply: its context and"
                " removed lines are not in the snapshot's file",
                file=fp.name,
                hunk=number,
            )
        new = hunk.new()
        out[pos : pos + len(old)] = new
        offset += len(new) - len(old)
        floor = pos + len(new)
    return out


def apply_patch(text: str, read: Callable[[str], bytes | None]) -> dict[str, bytes | None]:
    """Check ``text`` and apply it to the files ``read`` gives (None: no such file)."""
    if not text.strip():
        raise _error("the patch is empty")
    state: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        return state[path] if path in state else read(path)

    for fp in parse_patch(text):
        if fp.old_path is None:
            if current(fp.name) is not None:
                raise _error(f"{fp.name}: the patch creates it, but the snapshot has it already",
                             file=fp.name)  # fmt: skip
            lines: list[str] = []
        else:
            data = current(fp.old_path)
            if data is None:
                raise _error(f"{fp.old_path}: no such file in the snapshot", file=fp.old_path)
            if b"\x00" in data:
                raise _error(f"{fp.old_path} is a binary file: only text files can be patched",
                             file=fp.old_path)  # fmt: skip
            try:
                lines = data.decode("utf-8").splitlines(keepends=True)
            except UnicodeDecodeError:
                raise _error(f"{fp.old_path} is not UTF-8 text: only text files can be patched",
                             file=fp.old_path) from None  # fmt: skip
        result = _apply_file(fp, lines)
        if fp.new_path is None:
            if "".join(result):
                raise _error(f"{fp.old_path}: the patch deletes it but leaves lines in it",
                             file=fp.old_path)  # fmt: skip
            state[fp.old_path] = None  # type: ignore[index]
            continue
        if fp.old_path is not None and fp.old_path != fp.new_path:
            state[fp.old_path] = None
        state[fp.new_path] = "".join(result).encode("utf-8")
    return state
