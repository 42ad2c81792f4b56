"""The content-addressed blob store of code snapshots, its stat cache, and private job views.

Blobs live at ``AIR_HOME/code/blobs/<2 hex>/<sha256>``, written once (temp file + rename) and
made read-only. ``AIR_HOME/code/stat_cache.db`` maps (path, size, mtime_ns, inode, ctime_ns)
to a sha256, so an unchanged file is only ``stat``-ed; a file modified within the last
``RACY_S`` seconds is never cached (a later write could keep its timestamp). Stdlib only.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from air_skills.errors import InvalidInput

RACY_S = 2.0
CHUNK_BYTES = 1 << 20
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
READ_TRIES = 2  # a file that changes while read is read again once, then refused
# Reading, hashing and copying release the GIL: threads overlap them (and the filesystem's
# per-file latency) where there are cores; a handful of files is not worth a pool.
WORKERS = min(8, os.cpu_count() or 1)
POOL_FROM_FILES = 32
T = TypeVar("T")
R = TypeVar("R")


def parallel_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, on ``WORKERS`` threads for many items; the first error
    raised is raised here."""
    if len(items) < POOL_FROM_FILES or WORKERS < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(fn, items))


def code_root(home: Path) -> Path:
    return Path(home) / "code"


def blob_path(home: Path, sha256: str) -> Path:
    return code_root(home) / "blobs" / sha256[:2] / sha256


class StatCache:
    """sha256 by path, valid while size, mtime_ns, inode and ctime_ns are unchanged (sqlite)."""

    def __init__(self, home: Path, root: str) -> None:
        self.known: dict[str, tuple[int, int, int, int, str]] = {}
        self.pending: list[tuple[str, int, int, int, int, str]] = []
        self.conn: sqlite3.Connection | None = None
        try:
            code_root(home).mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(code_root(home) / "stat_cache.db", timeout=30)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER NOT NULL,"
                " mtime_ns INTEGER NOT NULL, ino INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,"
                " sha256 TEXT NOT NULL)"
            )
            lo = root.rstrip(os.sep) + os.sep
            hi = lo[:-1] + chr(ord(os.sep) + 1)
            for path, *rest in conn.execute(
                "SELECT path, size, mtime_ns, ino, ctime_ns, sha256 FROM files"
                " WHERE path >= ? AND path < ?",
                (lo, hi),
            ):
                self.known[path] = tuple(rest)  # type: ignore[assignment]
            self.conn = conn
        except (OSError, sqlite3.Error):
            self.conn = None  # a cache we cannot open only costs time

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int, int, int]:
        return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)

    def get(self, path: str, st: os.stat_result) -> str | None:
        hit = self.known.get(path)
        return hit[4] if hit and hit[:4] == self._key(st) else None

    def put(self, path: str, st: os.stat_result, sha256: str) -> None:
        if time.time() - st.st_mtime > RACY_S and time.time() - st.st_ctime > RACY_S:
            self.pending.append((path, *self._key(st), sha256))

    def close(self) -> None:
        if self.conn is None:
            return
        try:
            if self.pending:
                with self.conn:
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?)", self.pending
                    )
        except sqlite3.Error:
            pass
        finally:
            self.conn.close()


def _changed(before: os.stat_result, after: os.stat_result) -> bool:
    return (before.st_size, before.st_mtime_ns, before.st_ctime_ns) != (
        after.st_size,
        after.st_mtime_ns,
        after.st_ctime_ns,
    )


def hash_file(home: Path, path: str, rel: str, keep: bool) -> tuple[str, os.stat_result, bool]:
    """(sha256, stat, stored) of the file at ``path``; with ``keep`` its content becomes a blob.

    Refuses a file that changes while it is read (after ``READ_TRIES`` reads).
    """
    tmp_dir = code_root(home) / "tmp"
    for _ in range(READ_TRIES):
        digest = hashlib.sha256()
        tmp = None
        with open(path, "rb") as src:
            before = os.fstat(src.fileno())
            if keep:
                tmp_dir.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=tmp_dir)
                out = os.fdopen(fd, "wb")
            try:
                while chunk := src.read(CHUNK_BYTES):
                    digest.update(chunk)
                    if keep:
                        out.write(chunk)
            finally:
                if keep:
                    out.close()
            try:
                after = os.stat(path)
            except FileNotFoundError:
                if tmp:
                    os.unlink(tmp)
                raise
        if _changed(before, after):
            if tmp:
                os.unlink(tmp)
            continue
        sha = digest.hexdigest()
        if tmp:
            _publish(home, tmp, sha)
        return sha, after, keep
    raise InvalidInput(
        f"{rel} changed while it was read for the code snapshot (twice): nothing was launched",
        hint="launch again when the file is no longer being written, or list it in .airignore",
        path=rel,
    )


def _publish(home: Path, tmp: str, sha: str) -> None:
    """Move a finished temp file to its blob path (read-only); a blob already there wins."""
    dest = blob_path(home, sha)
    if dest.exists():
        os.unlink(tmp)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o444)
    os.replace(tmp, dest)


def read_blob(home: Path, sha256: str) -> bytes:
    return blob_path(home, sha256).read_bytes()


def _reflink(src: str, dst: str) -> bool:
    """Clone ``src`` to ``dst`` with the FICLONE ioctl; False where the filesystem has none."""
    with open(src, "rb") as s, open(dst, "wb") as d:
        try:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
            return True
        except OSError as exc:
            if exc.errno in (
                errno.EOPNOTSUPP,
                errno.EXDEV,
                errno.EINVAL,
                errno.ENOTTY,
                errno.EPERM,
            ):
                return False
            raise


def build_view(
    home: Path,
    manifest: Mapping[str, Any],
    dest: Path,
    overrides: Mapping[str, bytes | None] | None = None,
) -> str:
    """Write the snapshot's files into ``dest`` (the job's private, writable copy).

    ``overrides`` (a patch's result) replaces a file's content, adds a file, or (None) drops
    it. Returns the copy path that ran: ``reflink`` (FICLONE) or ``copy`` (shutil.copyfile,
    which uses the kernel's in-place copy on Linux).
    """
    overrides = dict(overrides or {})
    files: dict[str, dict[str, Any]] = manifest["files"]
    links: dict[str, str] = manifest.get("symlinks", {})
    wanted = set(files) | set(links) | {p for p, v in overrides.items() if v is not None}
    for folder in sorted({os.path.dirname(p) for p in wanted} - {""}):
        (dest / folder).mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    copies = [(rel, entry) for rel, entry in files.items() if rel not in overrides]
    method = "copy"
    if copies:  # the first file tells whether the filesystem clones
        rel, entry = copies[0]
        if _reflink(str(blob_path(home, entry["sha256"])), str(dest / rel)):
            method = "reflink"

    def copy(item: tuple[str, dict[str, Any]], cloned: bool = False) -> None:
        rel, entry = item
        src, dst = str(blob_path(home, entry["sha256"])), str(dest / rel)
        if not cloned and (method != "reflink" or not _reflink(src, dst)):
            shutil.copyfile(src, dst)  # copy_file_range/sendfile in the kernel on Linux
        if entry.get("mode", 0o644) & 0o111:
            os.chmod(dst, 0o755)

    if copies:
        copy(copies[0], cloned=method == "reflink")
    parallel_map(copy, copies[1:])
    for rel, content in overrides.items():
        if content is None:
            continue
        (dest / rel).write_bytes(content)
        old = files.get(rel)
        if old and old.get("mode", 0o644) & 0o111:
            os.chmod(dest / rel, 0o755)
    for rel, target in links.items():
        if rel not in overrides:
            os.symlink(target, dest / rel)
    return method


@contextmanager
def store_lock(home: Path, shared: bool) -> Iterator[None]:
    """A lock on the store: snapshots take it shared, ``air gc`` exclusive, so a collection
    never removes a blob that a snapshot being taken has just found stored."""
    code_root(home).mkdir(parents=True, exist_ok=True)
    fd = os.open(code_root(home) / "gc.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
