"""A job's code against its base commit: the full patch (uncommitted changes plus its patch).

``base_patch(code)`` reads the base commit's tree from the job's repository (``git ls-tree``,
``git cat-file --batch``; argv, never a shell) and diffs the job's code as launched against it.
Files ``.airignore`` left out of the snapshot and submodules are not counted as deleted.
Without a reachable commit (a plain folder, a moved repository) the base is the snapshot
itself and the patch is the job's own (``--patch``), or empty. Stdlib only.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

from air_skills.runtime.code.code_diff import file_changes
from air_skills.runtime.code.code_source import JobCode
from air_skills.runtime.code.snapshot_files import GIT_TIMEOUT_S, IgnoreRules, git_binary


class BaseTree:
    """A commit's files, read as ``code_diff.file_changes`` reads a job's code."""

    def __init__(self, git: str, root: Path, commit: str, entries: dict[str, tuple[str, str]]):
        self.git, self.root, self.commit = git, root, commit
        self.entries = entries  # path -> (mode, object id)
        self.job_id, self.digest, self.patch = f"commit {commit[:12]}", commit, None
        self._cache: dict[str, bytes] = {}

    def paths(self) -> set[str]:
        return set(self.entries)

    def sha(self, path: str) -> str | None:
        return None

    def mode(self, path: str) -> int:
        return 0o755 if self.entries.get(path, ("",))[0] == "100755" else 0o644

    def read(self, path: str) -> bytes | None:
        if path not in self.entries:
            return None
        if path not in self._cache:
            self._cache.update(self._cat([path]))
        return self._cache.get(path)

    def _cat(self, paths: list[str]) -> dict[str, bytes]:
        """The contents of ``paths`` in one ``git cat-file --batch`` run."""
        ids = "".join(self.entries[p][1] + "\n" for p in paths).encode()
        done = subprocess.run(
            [self.git, "cat-file", "--batch"],
            cwd=self.root,
            input=ids,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        )
        out, data, pos = {}, done.stdout, 0
        for path in paths:
            end = data.index(b"\n", pos)
            size = int(data[pos:end].split()[2])
            out[path] = data[end + 1 : end + 1 + size]
            pos = end + 1 + size + 1
        return out


def _git_object_id(data: bytes, length: int) -> str:
    """The id git gives a blob with ``data`` (sha1, or sha256 in a sha256 repository)."""
    algo = hashlib.sha256 if length == 64 else hashlib.sha1
    return algo(b"blob %d\0" % len(data) + data).hexdigest()


def base_tree(code: JobCode) -> BaseTree | None:
    """The job's base commit as a tree, or None (no git, no commit, repository unreachable)."""
    git, root, commit = git_binary(), code.root, code.commit
    if git is None or root is None or not commit or not root.is_dir():
        return None
    try:
        done = subprocess.run(
            [git, "ls-tree", "-r", "-z", "--full-tree", commit],
            cwd=root,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    entries: dict[str, tuple[str, str]] = {}
    for raw in done.stdout.split(b"\0"):
        if raw:
            meta, _, path = raw.partition(b"\t")
            mode, kind, oid = meta.decode().split()
            entries[os.fsdecode(path)] = (mode, oid) if kind != "commit" else ("160000", oid)
    return BaseTree(git, root, commit, entries)


def base_changes(code: JobCode) -> dict[str, Any] | None:
    """``file_changes`` from the base commit to the job's code (None: no base commit)."""
    tree = base_tree(code)
    if tree is None:
        return None
    modules = [p + "/" for p, (mode, _) in tree.entries.items() if mode == "160000"]
    ignore = IgnoreRules((code.read(".airignore") or b"").decode("utf-8", "replace").splitlines())
    for path in [p for p in tree.entries if tree.entries[p][0] == "160000" or ignore.ignored(p)]:
        del tree.entries[path]  # not in any snapshot: not a deletion
    ours = {p for p in code.paths() if not any(p.startswith(m) for m in modules)}
    changed = []
    for path in sorted(ours | set(tree.entries)):
        entry = tree.entries.get(path)
        if entry is None or path not in ours:
            changed.append(path)
            continue
        mine = code.read(path) or b""
        same_mode = (entry[0] == "100755") == bool(code.mode(path) & 0o111)
        if _git_object_id(mine, len(entry[1])) != entry[1] or not same_mode:
            changed.append(path)
    tree._cache.update(tree._cat([p for p in changed if p in tree.entries]))
    return file_changes(tree, code, changed)  # type: ignore[arg-type]


def base_patch(code: JobCode) -> str:
    """The full patch of the job's code against its base (see the module docstring)."""
    changes = base_changes(code)
    if changes is not None:
        head = f"# job {code.job_id}: code against commit {code.commit}\n"
        return head + changes["diff"]
    head = f"# job {code.job_id}: no base commit reachable; its patch against snapshot"
    return f"{head} {code.digest[:12]}\n" + (code.patch or "")
