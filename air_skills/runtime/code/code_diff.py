"""What differs between two jobs: their configs, and their code as launched (``air diff``).

The code diff is computed from the two manifests and patches in the store (``code_source``),
never from a job's view (the job may have written there): files whose stored sha256 match are
skipped unread. ``job_diff`` gives ``{"config": {key: {"a", "b"}}, "code": {...}}``; the code
part lists the files changed with their +/- line counts, then the unified diff (``a/`` and
``b/`` prefixes, ``\\ No newline at end of file`` where due: ``git apply`` and ``air launch
--patch`` read it). ``short_code_diff`` is its one-line form (MCP ``compare_jobs``). Stdlib only.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from air_skills.runtime.code.code_source import JobCode, load_job_code
from air_skills.runtime.store.records import JobRecord
from air_skills.tracking.compare import NOT_SET

SHORT_FILES = 8  # files named in the short form; the rest are counted


def config_changes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each key (nested ones dotted) whose value differs: ``{"a": value, "b": value}``."""
    flat_a, flat_b = _flatten(a), _flatten(b)
    return {
        key: {"a": flat_a.get(key, NOT_SET), "b": flat_b.get(key, NOT_SET)}
        for key in sorted(set(flat_a) | set(flat_b))
        if flat_a.get(key, NOT_SET) != flat_b.get(key, NOT_SET)
    }


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _text(data: bytes | None) -> list[str] | None:
    """``data`` as lines (None: a binary file; [] for no file)."""
    if data is None:
        return []
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _unified(path: str, old: list[str], new: list[str], a_has: bool, b_has: bool) -> list[str]:
    lines = difflib.unified_diff(
        old,
        new,
        fromfile=f"a/{path}" if a_has else "/dev/null",
        tofile=f"b/{path}" if b_has else "/dev/null",
        n=3,
    )
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            out.append(line.rstrip("\n") + "\n")  # difflib ends its headers with "\n" only
        elif line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return out


def file_changes(a: JobCode, b: JobCode, paths: Iterable[str] | None = None) -> dict[str, Any]:
    """The code difference from ``a`` to ``b``: files with +/- counts, totals, unified diff."""
    a_paths, b_paths = a.paths(), b.paths()
    files: list[dict[str, Any]] = []
    chunks: list[str] = []
    for path in sorted(paths if paths is not None else a_paths | b_paths):
        a_has, b_has = path in a_paths, path in b_paths
        sha_a, sha_b = a.sha(path), b.sha(path)
        if sha_a is not None and sha_a == sha_b and a.mode(path) == b.mode(path):
            continue
        old = a.read(path) if a_has else None
        new = b.read(path) if b_has else None
        if old == new and (a_has, a.mode(path)) == (b_has, b.mode(path)):
            continue
        status = "modified" if a_has and b_has else ("added" if b_has else "deleted")
        entry: dict[str, Any] = {"path": path, "status": status, "added": 0, "removed": 0}
        old_lines, new_lines = _text(old), _text(new)
        if old_lines is None or new_lines is None:
            entry["binary"] = True
            chunks.append(f"Binary files a/{path} and b/{path} differ\n")
        elif old == new:
            entry["status"] = "mode"
            entry["mode"] = f"{a.mode(path):o} -> {b.mode(path):o}"
        else:
            lines = _unified(path, old_lines, new_lines, a_has, b_has)
            body = lines[2:]
            entry["added"] = sum(1 for x in body if x.startswith("+"))
            entry["removed"] = sum(1 for x in body if x.startswith("-"))
            chunks.extend(lines)
        files.append(entry)
    return {
        "a": {"job_id": a.job_id, "digest": a.digest, "patched": a.patch is not None},
        "b": {"job_id": b.job_id, "digest": b.digest, "patched": b.patch is not None},
        "same": not files,
        "files": files,
        "added": sum(f["added"] for f in files),
        "removed": sum(f["removed"] for f in files),
        "diff": "".join(chunks),
    }


def job_diff(home: Path, row_a: JobRecord, row_b: JobRecord) -> dict[str, Any]:
    """Config and code differences between two jobs (their records); ``code`` is None when
    either ran its live folder (no snapshot to compare)."""
    spec_a, spec_b = row_a.spec_dict(), row_b.spec_dict()
    out: dict[str, Any] = {
        "a": row_a.job_id,
        "b": row_b.job_id,
        "config": config_changes(spec_a.get("config") or {}, spec_b.get("config") or {}),
        "code": None,
    }
    if spec_a.get("command") != spec_b.get("command"):
        out["command"] = {"a": spec_a.get("command"), "b": spec_b.get("command")}
    if row_a.code and row_b.code:
        a = load_job_code(home, row_a.job_id, row_a.code)
        b = load_job_code(home, row_b.job_id, row_b.code)
        out["code"] = file_changes(a, b)
    return out


def short_code_diff(changes: dict[str, Any] | None) -> str:
    """One line: ``same code``, or ``3 files (+10 -2): model.py +1 -1, ...``."""
    if changes is None:
        return "no snapshot to compare (code: live)"
    files = changes["files"]
    if not files:
        return "same code"
    named = []
    for f in files[:SHORT_FILES]:
        what = "binary" if f.get("binary") else f"+{f['added']} -{f['removed']}"
        if f["status"] in ("added", "deleted"):
            what = f"{f['status']}, {what}"
        named.append(f"{f['path']} {what}" if f["status"] != "mode" else f"{f['path']} (mode)")
    more = f", and {len(files) - SHORT_FILES} more" if len(files) > SHORT_FILES else ""
    total = f"+{changes['added']} -{changes['removed']}"
    count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    return f"{count} ({total}): " + ", ".join(named) + more
