"""Code snapshots: every job runs the code as it was at launch, stored once by content.

API (stdlib only; the local backend and, later, the Ray backend, rerun, diff, export and gc
build on it):

- ``take_snapshot(home, workdir, store=True) -> Snapshot``: list the tree's files
  (``snapshot_files``), hash them (stat-cached), store new contents as blobs, write the
  manifest. ``store=False`` (dry run) only hashes. Raises ``InvalidInput`` for a tree over the
  limits, a symlink leading outside it, or a file that changes while read.
- ``load_manifest(home, digest) -> dict``; ``read_blob(home, sha256) -> bytes``.
- ``build_view(home, manifest, dest, overrides) -> str``: the job's private writable copy
  (``snapshot_store``); returns the copy path that ran (``reflink`` or ``copy``).
- ``dirty_diff(root)``: ``git diff HEAD`` of the tracked files.

On disk, under ``AIR_HOME/code/``:

- ``blobs/<sha256[:2]>/<sha256>``: one read-only file per distinct content, written once
  (temp file in ``tmp/`` + rename).
- ``manifests/<digest>.json``: ``{"version": 1, "files": {path: {"sha256", "size", "mode"}},
  "symlinks": {path: target}}``, paths relative POSIX, sorted; ``mode`` is 0o755 or 0o644
  (only the executable bit is kept, as git does); symlink targets are relative and stay inside
  the tree. The digest is the sha256 of this JSON in canonical form (sorted keys, no spaces):
  the same content gives the same digest whatever the commit, so a tree is stored (or, on Ray,
  uploaded) once. Where the code came from (commit, branch, remote, dirty) belongs to each job,
  not to the content: it is in the job's record (``JobInfo.code``) and ``jobs/<id>/code.json``.
- ``stat_cache.db``: the stat cache (see ``snapshot_store``).
- ``staging/<pid>-<token>@<host>/``: a launch's view written while its files were read (the
  cold path: one read per file, the blob and the view written from the same bytes), moved
  into the job's folder by ``job_code.materialize``; a dead launcher's is removed.

A job's folder gets ``code/`` (its view: the tree from the snapshot's root, the command runs
at the same relative place as the launch's workdir), ``code.json`` (its code info, with the
root, the cwd inside the view and the copy path) and, for a patched launch, ``code.patch``.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import InvalidInput, InvalidSpec
from air_skills.runtime.code.snapshot_files import GitInfo, dirty_diff, list_files
from air_skills.runtime.code.snapshot_store import (
    StatCache,
    blob_path,
    build_view,
    code_root,
    hash_file,
    parallel_map,
    prepare_store,
    read_blob,
    store_lock,
)

__all__ = [
    "Snapshot",
    "build_view",
    "dirty_diff",
    "load_manifest",
    "manifest_digest",
    "read_blob",
    "take_snapshot",
]

MANIFEST_VERSION = 1
BIGGEST_SHOWN = 5


@dataclass
class Snapshot:
    """A tree's snapshot: its digest and manifest, where it came from, what it cost."""

    digest: str
    manifest: dict[str, Any]
    root: Path
    cwd: str  # the launch's workdir relative to root ("" at the root), POSIX
    mode: str  # "git" | "folder"
    git: GitInfo | None
    files: int
    bytes: int
    files_read: int = 0  # files whose content was read (not answered by the stat cache)
    stored: bool = True
    notes: list[str] = field(default_factory=list)
    rerun_of: str | None = None  # the job whose stored snapshot this is (``air rerun``)
    view: Path | None = None  # the private copy made while reading (``take_snapshot(view=)``)
    view_files: frozenset[str] = frozenset()  # the files in ``view``


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The sha256 of the manifest's canonical JSON."""
    return hashlib.sha256(_canonical(manifest)).hexdigest()


def _canonical(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def manifest_path(home: Path, digest: str) -> Path:
    return code_root(home) / "manifests" / f"{digest}.json"


def load_manifest(home: Path, digest: str) -> dict[str, Any]:
    return json.loads(manifest_path(home, digest).read_bytes())


def _limits() -> tuple[int, int]:
    max_files = settings.get("AIR_SNAPSHOT_MAX_FILES")
    max_mb = settings.get("AIR_SNAPSHOT_MAX_MB")
    return int(max_files), int(max_mb * 1024 * 1024)


def _biggest(sizes: dict[str, int]) -> str:
    """The biggest files and top folders, by bytes and by file count."""
    folders: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for path, size in sizes.items():
        top = path.split("/", 1)[0] + "/" if "/" in path else None
        if top:
            folders[top] += size
            counts[top] += 1
    files = sorted(sizes.items(), key=lambda kv: -kv[1])[:BIGGEST_SHOWN]
    parts = ["biggest files: " + ", ".join(f"{p} ({_mb(s)})" for p, s in files)]
    if folders:
        parts.append(
            "biggest folders: "
            + ", ".join(f"{p} ({_mb(s)}, {counts[p]} files)" for p, s in folders.most_common(3))
        )
    return "; ".join(parts)


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _over_limits(sizes: dict[str, int], max_files: int, max_bytes: int) -> InvalidInput:
    total = sum(sizes.values())
    what = (
        f"{len(sizes)} files (limit {max_files})"
        if len(sizes) > max_files
        else f"{_mb(total)} (limit {_mb(max_bytes)})"
    )
    return InvalidInput(
        f"the code snapshot would hold {what}: nothing was launched; {_biggest(sizes)}",
        hint=(
            "list what the job does not need in a .airignore file at the tree's root"
            " (gitignore syntax, e.g. `data/` or `*.ckpt`), raise AIR_SNAPSHOT_MAX_FILES /"
            " AIR_SNAPSHOT_MAX_MB, or run in the live folder with `--code live`"
        ),
        files=len(sizes),
        bytes=total,
    )


def _refuse_undecodable(root: Path, paths: list[str]) -> None:
    """A name that is not UTF-8 cannot be stored (the manifest and the stat cache are text):
    refuse it by name (its bytes escaped), before anything is read."""
    bad = []
    for rel in paths:
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            bad.append(ascii(os.fsencode(rel))[2:-1])
    if bad:
        raise InvalidSpec(
            f"the code snapshot of {root} cannot hold {len(bad)} file name(s) that are not"
            f" UTF-8: {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}; nothing was launched",
            hint="rename them (e.g. `mv $'bad\\xff.py' bad.py`), or list them in .airignore"
            " (gitignore syntax, e.g. `bad*.py`)",
            files=bad[:20],
        )


def _symlink_target(root: Path, rel: str) -> str:
    """The target of the symlink ``rel`` as a relative path inside the tree, or an error."""
    full = root / rel
    real = os.path.realpath(full)
    root_real = os.path.realpath(root)
    if os.path.commonpath([real, root_real]) != root_real:
        raise InvalidInput(
            f"{rel} is a symlink to {os.readlink(full)}, outside the tree {root}:"
            " nothing was launched (a snapshot does not follow links out of its tree)",
            hint="copy what it points to into the tree, list the link in .airignore,"
            " or run in the live folder with `--code live`",
            path=rel,
        )
    return os.path.relpath(real, os.path.realpath(full.parent))


def _exclusions(root: Path, exclude: list[Path]) -> list[str]:
    """The relative prefixes (``dir/``) of ``exclude`` folders that lie inside ``root``."""
    out = []
    for folder in exclude:
        try:
            rel = Path(os.path.realpath(folder)).relative_to(os.path.realpath(root))
        except ValueError:
            continue
        if str(rel) != ".":
            out.append(rel.as_posix() + "/")
    return out


def take_snapshot(
    home: Path,
    workdir: str | os.PathLike[str],
    store: bool = True,
    view: Path | None = None,
) -> Snapshot:
    """Snapshot the tree of ``workdir`` (see the module docstring). AIR_HOME is never in it.

    ``view`` (with ``store``): a folder, not yet there, that receives a private copy of each
    file read, written from the same bytes as its blob (one read of the source, no copy from
    the store afterwards); ``Snapshot.view_files`` lists them. The folder is made only when a
    file is read; ``build_view(..., present=view_files)`` completes it.
    """
    home = Path(home)
    if not store:
        return _take(home, workdir, store, None)
    with store_lock(home, shared=True):
        return _take(home, workdir, store, view)


def _take(home: Path, workdir: str | os.PathLike[str], store: bool, view: Path | None) -> Snapshot:
    workdir_path = Path(os.path.realpath(workdir))
    listing = list_files(workdir_path, frozenset({os.path.realpath(home)}))
    root = listing.root
    root_s = str(root)
    _refuse_undecodable(root, listing.paths)
    skip = _exclusions(root, [home])
    entries: list[tuple[str, os.stat_result]] = []
    for rel in listing.paths:
        if any(rel.startswith(prefix) for prefix in skip):
            continue
        try:
            st = os.lstat(f"{root_s}/{rel}")
        except FileNotFoundError:
            continue  # deleted from disk but still in git's index: the snapshot has it as on disk
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            entries.append((rel, st))
    max_files, max_bytes = _limits()
    sizes = {rel: st.st_size for rel, st in entries if stat.S_ISREG(st.st_mode)}
    if len(entries) > max_files or sum(sizes.values()) > max_bytes:
        raise _over_limits(sizes, max_files, max_bytes)
    files: dict[str, dict[str, Any]] = {}
    links: dict[str, str] = {}
    cache = StatCache(home, root_s)
    todo: list[tuple[str, str, os.stat_result]] = []  # (rel, full, lstat): files to read
    written: set[str] = set()
    try:
        for rel, st in entries:
            if stat.S_ISLNK(st.st_mode):
                links[rel] = _symlink_target(root, rel)
                continue
            full = f"{root_s}/{rel}"
            sha = cache.get(full, st)
            if sha is None or (store and not blob_path(home, sha).exists()):
                todo.append((rel, full, st))
            else:
                files[rel] = _entry(sha, st)
        view = view if store and todo else None
        if store and todo:
            prepare_store(home)
        if view is not None:  # each folder made once, before the threads write into it
            for folder in sorted({os.path.dirname(rel) for rel, _, _ in todo}):
                os.makedirs(os.path.join(view, folder), exist_ok=True)

        def read(item: tuple[str, str, os.stat_result]) -> tuple[str, os.stat_result] | None:
            rel, full, listed = item
            out = None if view is None else os.path.join(view, rel)
            try:
                return hash_file(home, full, rel, keep=store, view=out, listed=listed)
            except FileNotFoundError:
                return None  # deleted since it was listed (an editor's temp file): as on disk

        for (rel, full, _), got in zip(todo, parallel_map(read, todo), strict=True):
            if got is not None:
                cache.put(full, got[1], got[0])
                files[rel] = _entry(*got)
                written.add(rel)
    finally:
        cache.close()
    manifest = {"version": MANIFEST_VERSION, "files": dict(sorted(files.items())),
                "symlinks": links}  # fmt: skip
    digest = manifest_digest(manifest)
    if store:
        _write_manifest(home, digest, manifest)
    cwd = Path(os.path.relpath(workdir_path, root)).as_posix()
    return Snapshot(
        digest=digest,
        manifest=manifest,
        root=root,
        cwd="" if cwd == "." else cwd,
        mode=listing.mode,
        git=listing.git,
        files=len(files) + len(links),
        bytes=sum(f["size"] for f in files.values()),
        files_read=len(written),
        stored=store,
        notes=listing.notes,
        view=view,
        view_files=frozenset(written) if view is not None else frozenset(),
    )


def _entry(sha: str, st: os.stat_result) -> dict[str, Any]:
    return {"sha256": sha, "size": st.st_size, "mode": 0o755 if st.st_mode & 0o111 else 0o644}


def _write_manifest(home: Path, digest: str, manifest: dict[str, Any]) -> None:
    path = manifest_path(home, digest)
    if path.exists():
        # A fresh mtime keeps it from `air gc` until its job is in the store (code_gc.GRACE_S).
        os.utime(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Per thread too: air-mcp serves several agents' launches of one tree at once.
    tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_bytes(_canonical(manifest))
    os.chmod(tmp, 0o444)
    os.replace(tmp, path)
