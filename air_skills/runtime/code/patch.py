"""A unified-diff checker and applier in pure Python (``patch``/``git apply`` may be missing).

``apply_patch(text, read)`` parses a unified diff (``git diff`` or ``diff -u`` output), reads
its paths as ``git apply`` and ``patch`` would (``_read_paths``: a one-letter prefix such as
``a/``, ``b/``, ``c/``, ``i/``, ``o/``, ``w/`` stripped when both headers carry one and the
stripped path is in the tree or created by the patch; a ``--no-prefix`` diff read as ``-p0``;
a header both readings fit refused, naming both), checks it (text only, not empty, every path
relative and inside the tree) and applies it in memory to the files that ``read(path)``
returns, without fuzz: a hunk's context must match exactly, at its line number or shifted
(as ``git apply`` allows), found in time linear in the file (``_Index``); a file over
``AIR_PATCH_MAX_FILE_MB`` is refused, and so is a rename onto an existing file (as
``git apply`` does). It returns ``{path: new bytes, or None for a deleted file}``; nothing is
written. ``check_layout`` refuses a result the tree cannot hold (a file over a folder, under a
file, or through a symlink). Every problem is an ``InvalidSpec`` naming the file and the hunk.
Stdlib only but for ``settings``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from air_skills import settings
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
    old_raw: str | None = None  # the headers' paths as written (prefix and all)
    new_raw: str | None = None

    @property
    def name(self) -> str:
        return self.new_path or self.old_path or "?"


def _error(message: str, **details: object) -> InvalidSpec:
    return InvalidSpec(f"patch refused, nothing was launched: {message}", hint=_HINT, **details)


def _header_path(line: str) -> str | None:
    """A ---/+++ header's path as written (None: /dev/null)."""
    raw = line[4:].rstrip("\r\n")
    if "\t" in raw:  # diff -u appends a tab and a timestamp
        raw = raw.split("\t", 1)[0]
    if raw.startswith('"') and raw.endswith('"'):
        raw = raw[1:-1]
    return None if raw == "/dev/null" else raw


_PREFIX = re.compile(r"^[a-z]/")  # git's a/ b/ (c/ i/ o/ w/ with diff.mnemonicPrefix), diff -u's


def _strip_one(path: str | None) -> str | None:
    return path[2:] if path is not None else None


def _p1_fits(old: str | None, new: str | None) -> bool:
    """Whether -p1 (strip one leading folder) is a reading: both headers carry a one-letter
    prefix (one side /dev/null: the other does)."""
    given = [p for p in (old, new) if p is not None]
    return bool(given) and all(_PREFIX.match(p) and len(p) > 2 for p in given)


def _read_paths(fp: FilePatch, exists: Callable[[str], bool] | None) -> None:
    """Set ``fp``'s paths as git and patch read its headers: -p1 when both carry a one-letter
    prefix and the stripped path is in the tree (or the patch creates it), -p0 otherwise;
    refused when both readings name files of the tree. Without ``exists`` (no tree at hand):
    -p1 whenever both headers carry a one-letter prefix, as ``git apply`` does."""
    old, new = fp.old_raw, fp.new_raw
    p0 = (old, new)
    p1 = (_strip_one(old), _strip_one(new)) if _p1_fits(old, new) else None
    chosen = p1 or p0
    if p1 is not None and exists is not None and old is not None:
        fits1, fits0 = exists(check_path(p1[0] or "")), exists(check_path(old))
        if fits1 and fits0 and p1[0] != old:
            raise _error(
                f"--- {old} / +++ {new}: both readings name files of the tree: {p1[0]} (the"
                f" prefix stripped, -p1) and {old} (as written, -p0); make the patch with"
                " `git diff` (a/ b/ prefixes) or `git diff --no-prefix`, from the tree's root",
                file=old,
            )
        chosen = p0 if fits0 and not fits1 else p1
    fp.old_path = check_path(chosen[0]) if chosen[0] is not None else None
    fp.new_path = check_path(chosen[1]) if chosen[1] is not None else None


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


def parse_patch(text: str, exists: Callable[[str], bool] | None = None) -> list[FilePatch]:
    """The file patches of a unified diff (see the module docstring); ``exists`` (a path of
    the tree: is it there?) decides between -p1 and -p0 as ``_read_paths`` says."""
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
            old, new = _header_path(line), _header_path(lines[i + 1])
            if old is None and new is None:
                raise _error("a file patch is from /dev/null to /dev/null")
            fp = FilePatch(None, None, old_raw=old, new_raw=new)
            _read_paths(fp, exists)
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


_BASE = 1_000_003
_MOD = (1 << 61) - 1
MAX_CANDIDATES = 2_000_000  # windows a patch's hunks may try in one file, all together


class _Index:
    """A file's lines for matching hunks in linear time: each distinct line as an integer,
    prefix hashes of those integers (any window's hash in O(1)), and where each line occurs."""

    def __init__(self, content: list[str]) -> None:
        self.content = content
        self.ids: dict[str, int] = {}
        self.where: dict[int, list[int]] = {}
        self.prefix = [0]
        ids, where, prefix = self.ids, self.where, self.prefix
        h = 0
        for pos, line in enumerate(content):
            i = ids.setdefault(line, len(ids) + 1)
            where.setdefault(i, []).append(pos)
            h = (h * _BASE + i) % _MOD
            prefix.append(h)
        self.tried = 0

    def window(self, pos: int, n: int, power: int) -> int:
        return (self.prefix[pos + n] - self.prefix[pos] * power) % _MOD

    def find(self, old: list[str], expected: int, start: int) -> int | None:
        """Where ``old`` occurs at or after ``start``, nearest to ``expected`` (None: nowhere).

        Candidates are the places of the hunk's rarest line, tried outward from ``expected``
        by window hash (O(1) each); only a hash that matches is compared line by line.
        """
        n, size = len(old), len(self.content)
        if not n:
            return min(max(expected, start), size)
        want, rare, rare_at = 0, None, 0
        for j, line in enumerate(old):
            i = self.ids.get(line)
            if i is None:  # a line the file does not have: no window can match
                return None
            want = (want * _BASE + i) % _MOD
            if rare is None or len(self.where[i]) < len(self.where[rare]):
                rare, rare_at = i, j
        assert rare is not None
        power = pow(_BASE, n, _MOD)
        places = self.where[rare]
        right = bisect.bisect_left(places, expected + rare_at)
        left = right - 1
        while left >= 0 or right < len(places):
            at_left = places[left] - rare_at if left >= 0 else None
            at_right = places[right] - rare_at if right < len(places) else None
            go_left = at_right is None or (
                at_left is not None and expected - at_left <= at_right - expected
            )
            if go_left:
                pos, left = places[left] - rare_at, left - 1
            else:
                pos, right = places[right] - rare_at, right + 1
            if pos < start or pos + n > size:
                continue
            self.tried += 1
            if self.tried > MAX_CANDIDATES:
                raise _TooMuch
            if self.window(pos, n, power) == want and self.content[pos : pos + n] == old:
                return pos
        return None


class _TooMuch(Exception):
    pass


def _apply_file(fp: FilePatch, content: list[str]) -> list[str]:
    """The file's lines after the hunks: each found in the original lines (in order, after the
    one before), then the pieces joined; linear in the file's size plus the patch's."""
    index: _Index | None = None
    pieces: list[list[str]] = []
    floor = 0
    for number, hunk in enumerate(fp.hunks, 1):
        old = hunk.old()
        expected = max(hunk.old_start - 1, 0) if hunk.old_len else hunk.old_start
        n = len(old)
        if not n:
            pos: int | None = min(max(expected, floor), len(content))
        elif floor <= expected <= len(content) - n and content[expected : expected + n] == old:
            pos = expected
        else:
            index = index or _Index(content)
            try:
                pos = index.find(old, expected, floor)
            except _TooMuch:
                raise _error(
                    f"{fp.name}, hunk {number} ({hunk.header}): the hunks match in too many"
                    f" places ({MAX_CANDIDATES} tried); make the patch against this snapshot"
                    " with more context lines",
                    file=fp.name,
                    hunk=number,
                ) from None
        if pos is None:
            raise _error(
                f"{fp.name}, hunk {number} ({hunk.header}) does not apply: its context and"
                " removed lines are not in the snapshot's file",
                file=fp.name,
                hunk=number,
            )
        pieces.append(content[floor:pos])
        pieces.append(hunk.new())
        floor = pos + n
    pieces.append(content[floor:])
    return [line for piece in pieces for line in piece]


def apply_patch(text: str, read: Callable[[str], bytes | None]) -> dict[str, bytes | None]:
    """Check ``text`` and apply it to the files ``read`` gives (None: no such file)."""
    if not text.strip():
        raise _error("the patch is empty")
    state: dict[str, bytes | None] = {}
    max_bytes = int(settings.get("AIR_PATCH_MAX_FILE_MB") * 2**20)

    def current(path: str) -> bytes | None:
        return state[path] if path in state else read(path)

    def exists(path: str) -> bool:
        try:
            return read(path) is not None
        except OSError:  # a reader that raises for a missing file
            return False

    for fp in parse_patch(text, exists=exists):
        if fp.old_path is None:
            if current(fp.name) is not None:
                raise _error(f"{fp.name}: the patch creates it, but the snapshot has it already",
                             file=fp.name)  # fmt: skip
            lines: list[str] = []
        else:
            data = current(fp.old_path)
            if data is None:
                raise _error(f"{fp.old_path}: no such file in the snapshot", file=fp.old_path)
            if len(data) > max_bytes:
                raise _error(
                    f"{fp.old_path} is {len(data) / 1e6:.1f} MB, over the {max_bytes / 2**20:g}"
                    " MiB a patch may change (AIR_PATCH_MAX_FILE_MB): change a file that big in"
                    " the tree itself, not through a patch",
                    file=fp.old_path,
                    bytes=len(data),
                )
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
            if current(fp.new_path) is not None:  # as `git apply` does: never overwrite
                raise _error(
                    f"{fp.old_path} -> {fp.new_path}: the patch renames a file onto one the"
                    f" snapshot has already; delete {fp.new_path} in the patch first, or"
                    " rename to a free name",
                    file=fp.new_path,
                )
            state[fp.old_path] = None
        state[fp.new_path] = "".join(result).encode("utf-8")
    return state


def check_layout(
    changes: Mapping[str, bytes | None], files: Collection[str], links: Collection[str]
) -> None:
    """Refuse a patch's result that the tree cannot hold: a file where the snapshot has a
    folder, a file under a file or through a symlink (``lnk/new.py`` with ``lnk -> pkg``:
    the view would write outside ``lnk``'s own entry, or fail).

    ``files`` and ``links``: the snapshot's regular files and symlinks; ``changes``: what the
    patch writes (None: deletes).
    """
    written = {p for p, v in changes.items() if v is not None}
    if not written:
        return
    kept = {p for p in files if changes.get(p, b"") is not None} | written
    link_set = set(links)
    folders = {p[:i] for p in kept | link_set for i, c in enumerate(p) if c == "/"}
    for path in sorted(written):
        if path in link_set:
            raise _error(f"{path} is a symlink in the snapshot; patch the file it points to",
                         file=path)  # fmt: skip
        if path in folders:
            raise _error(f"{path} is a folder in the snapshot: a patch cannot make it a file",
                         file=path)  # fmt: skip
        parts = path.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if above in link_set:
                raise _error(
                    f"{path}: {above} is a symlink in the snapshot; a patch writes real paths"
                    f" only (write the file under the folder {above} points to)",
                    file=path,
                )
            if above in kept:
                raise _error(f"{path}: {above} is a file in the snapshot, not a folder",
                             file=path)  # fmt: skip
