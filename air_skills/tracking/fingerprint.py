"""Content fingerprints of data inputs: a sha256 per file or folder, file digests cached.

A file's digest is the sha256 of its content; a folder's is the sha256 of its sorted listing
(path, size, content digest of every file), cut to 32 hex characters (MLflow keeps at most 36).
File digests are cached in ``AIR_HOME/fingerprints.db`` by real path, size, modification time
and inode, so a large folder is read once and then only ``stat``-ed; a file modified within the
last ``RACY_S`` seconds is never cached (its timestamp could still match a later write).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from air_skills.errors import DataPathRefused

DIGEST_CHARS = 32  # of a sha256 hex digest: MLflow's dataset digest holds at most 36
RACY_S = 2.0  # files modified this recently are re-read every time, never cached
CHUNK_BYTES = 1 << 20

_recent: dict[tuple[str, str], Fingerprint] = {}  # (real path, digest) -> stats, this process
_recent_lock = threading.Lock()


@dataclass(frozen=True)
class Fingerprint:
    """A content digest and what it took to compute it."""

    digest: str
    files: int
    bytes: int
    files_read: int  # files whose content was read (not answered by the cache)
    bytes_read: int


def recent(real: str, digest: str) -> Fingerprint | None:
    """The fingerprint this process computed for ``real`` with ``digest``, if it still has it."""
    with _recent_lock:
        return _recent.get((real, digest))


class _Cache:
    """File digests by real path, checked against size, mtime and inode (sqlite, WAL)."""

    def __init__(self, home: Path | None) -> None:
        self.conn: sqlite3.Connection | None = None
        self.pending: list[tuple[str, int, int, int, str]] = []
        self.known: dict[str, tuple[int, int, int, str]] = {}
        if home is None:
            return
        try:
            Path(home).mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(Path(home) / "fingerprints.db", timeout=30)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER NOT NULL,"
                " mtime_ns INTEGER NOT NULL, ino INTEGER NOT NULL, digest TEXT NOT NULL)"
            )
            self.conn = conn
        except (OSError, sqlite3.Error):
            self.conn = None  # a cache we cannot open only costs time

    def preload(self, folder: str) -> None:
        """Load every entry under ``folder`` in one query (a big folder: one read, not N)."""
        if self.conn is None:
            return
        lo = folder.rstrip(os.sep) + os.sep
        hi = lo[:-1] + chr(ord(os.sep) + 1)
        rows = self.conn.execute(
            "SELECT path, size, mtime_ns, ino, digest FROM files WHERE path >= ? AND path < ?",
            (lo, hi),
        )
        for path, size, mtime_ns, ino, digest in rows:
            self.known[path] = (size, mtime_ns, ino, digest)

    def get(self, path: str, st: os.stat_result) -> str | None:
        hit = self.known.get(path)
        if hit is None and self.conn is not None:
            row = self.conn.execute(
                "SELECT size, mtime_ns, ino, digest FROM files WHERE path = ?", (path,)
            ).fetchone()
            hit = tuple(row) if row else None  # type: ignore[assignment]
        if hit and hit[:3] == (st.st_size, st.st_mtime_ns, st.st_ino):
            return hit[3]
        return None

    def put(self, path: str, st: os.stat_result, digest: str) -> None:
        if time.time() - st.st_mtime > RACY_S:
            self.pending.append((path, st.st_size, st.st_mtime_ns, st.st_ino, digest))

    def close(self) -> None:
        if self.conn is None:
            return
        try:
            if self.pending:
                with self.conn:
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?)", self.pending
                    )
        except sqlite3.Error:
            pass
        finally:
            self.conn.close()


def fingerprint(path: str | os.PathLike[str], home: Path | None = None) -> Fingerprint:
    """The content digest of a file or folder (symlinks inside followed, each real folder once).

    ``home`` (AIR_HOME) holds the cache; without it every file is read.
    """
    real = os.path.realpath(path, strict=True)
    cache = _Cache(home)
    counts = {"files": 0, "bytes": 0, "files_read": 0, "bytes_read": 0}
    try:
        st = os.stat(real)
        if stat.S_ISREG(st.st_mode):
            digest = _file_digest(real, st, cache, counts)
        else:
            cache.preload(real)
            digest = _tree_digest(real, cache, counts)
    finally:
        cache.close()
    fp = Fingerprint(digest=digest[:DIGEST_CHARS], **counts)
    with _recent_lock:
        if len(_recent) > 1024:  # a long-lived process (the MCP server) launches for days
            _recent.clear()
        _recent[(real, fp.digest)] = fp
    return fp


def _file_digest(path: str, st: os.stat_result, cache: _Cache, counts: dict[str, int]) -> str:
    counts["files"] += 1
    counts["bytes"] += st.st_size
    cached = cache.get(path, st)
    if cached is not None:
        return cached
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(CHUNK_BYTES):
                h.update(block)
    except OSError as exc:
        raise DataPathRefused(
            f"cannot read data file {path}: {exc.strerror or exc}",
            hint="make it readable by this user, or leave it out of the input",
            path=path,
        ) from None
    counts["files_read"] += 1
    counts["bytes_read"] += st.st_size
    digest = h.hexdigest()
    cache.put(path, st, digest)
    return digest


def _tree_digest(root: str, cache: _Cache, counts: dict[str, int]) -> str:
    """sha256 over the sorted listing: one line per file (path, size, digest) and folder."""
    lines: list[str] = []
    visited = {root}
    stack = [(root, "")]
    while stack:
        folder, rel = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise DataPathRefused(
                f"cannot list data folder {folder}: {exc.strerror or exc}",
                hint="make it readable by this user",
                path=folder,
            ) from None
        for entry in entries:
            name = rel + entry.name
            try:
                st = entry.stat()  # follows symlinks: the job sees what they point to
            except OSError:
                lines.append(f"{name}\0broken-link\n")
                continue
            if stat.S_ISDIR(st.st_mode):
                target = os.path.realpath(entry.path) if entry.is_symlink() else entry.path
                if target in visited:  # a second way into a folder already read
                    lines.append(f"{name}/\0same-as\0{os.path.relpath(target, root)}\n")
                    continue
                visited.add(target)
                lines.append(f"{name}/\n")
                stack.append((target, name + "/"))
            elif stat.S_ISREG(st.st_mode):
                real = os.path.realpath(entry.path) if entry.is_symlink() else entry.path
                digest = _file_digest(real, st, cache, counts)
                lines.append(f"{name}\0{st.st_size}\0{digest}\n")
            else:  # fifos, sockets, devices: never read (a fifo would block)
                lines.append(f"{name}\0special\n")
    h = hashlib.sha256()
    for line in sorted(lines):
        h.update(line.encode("utf-8", "surrogateescape"))
    return h.hexdigest()
