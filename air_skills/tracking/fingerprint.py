"""Content fingerprints of data inputs: a sha256 per file or folder, file digests cached.

A file's digest is the sha256 of its content; a folder's is the sha256 of its sorted listing
(path, size, content digest of every file), cut to 32 hex characters (MLflow keeps at most 36).
File digests are cached in ``AIR_HOME/fingerprints.db`` by real path, size, modification time
and inode, so a large folder is read once and then only ``stat``-ed; a file modified within the
last ``RACY_S`` seconds is never cached (its timestamp could still match a later write).

Each fingerprint also records the input's metadata (every file's size, mtime and inode) under
its digest, so the end-of-job re-check (``recheck``) compares metadata first and reads content
only within a bound of bytes and time: a data input swapped for a 20 GB file is reported as
changed from its size, not read whole while the job's supervisor waits.
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


class OverBudget(Exception):
    """A bounded scan reached its limit of bytes read or of time."""


@dataclass
class Budget:
    """What a bounded scan may still spend: bytes of content read, and time (a deadline)."""

    bytes_left: int
    deadline: float  # time.monotonic()

    @classmethod
    def of(cls, max_bytes: float, max_s: float) -> Budget:
        return cls(int(max_bytes), time.monotonic() + max_s)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise OverBudget("time")

    def spend(self, n: int) -> None:
        if n > self.bytes_left:
            raise OverBudget("bytes")
        self.bytes_left -= n
        self.check_time()


def recent(real: str, digest: str) -> Fingerprint | None:
    """The fingerprint this process computed for ``real`` with ``digest``, if it still has it."""
    with _recent_lock:
        return _recent.get((real, digest))


class _Cache:
    """File digests by real path, checked against size, mtime and inode (sqlite, WAL); and the
    metadata signature of each input by (real path, digest)."""

    def __init__(self, home: Path | None) -> None:
        self.conn: sqlite3.Connection | None = None
        self.pending: list[tuple[str, int, int, int, str]] = []
        self.pending_meta: list[tuple[str, str, str, int]] = []
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
            conn.execute(
                "CREATE TABLE IF NOT EXISTS inputs (path TEXT NOT NULL, digest TEXT NOT NULL,"
                " meta TEXT NOT NULL, racy INTEGER NOT NULL, PRIMARY KEY (path, digest))"
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

    def meta_of(self, path: str, digest: str) -> tuple[str, bool] | None:
        """The metadata signature recorded with ``digest`` and whether it was racy."""
        if self.conn is None:
            return None
        row = self.conn.execute(
            "SELECT meta, racy FROM inputs WHERE path = ? AND digest = ?", (path, digest)
        ).fetchone()
        return (row[0], bool(row[1])) if row else None

    def close(self) -> None:
        if self.conn is None:
            return
        try:
            with self.conn:
                if self.pending:
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?)", self.pending
                    )
                if self.pending_meta:
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO inputs VALUES (?,?,?,?)", self.pending_meta
                    )
        except sqlite3.Error:
            pass
        finally:
            self.conn.close()


class _Scan:
    """One walk over a file or folder: its content digest (unless ``read`` is off), and its
    metadata signature (size, mtime and inode of every file), within an optional budget."""

    def __init__(self, cache: _Cache, budget: Budget | None = None, read: bool = True) -> None:
        self.cache = cache
        self.budget = budget
        self.read = read
        self.counts = {"files": 0, "bytes": 0, "files_read": 0, "bytes_read": 0}
        self.meta: list[str] = []
        self.racy = False  # a file changed within RACY_S: its metadata may hide a later write

    def digest(self, real: str) -> str:
        st = os.stat(real)
        if stat.S_ISREG(st.st_mode):
            self.meta.append(_meta_line("", st))
            return self.file(real, st)
        self.cache.preload(real)
        return self.tree(real)

    def signature(self) -> str:
        h = hashlib.sha256()
        for line in sorted(self.meta):
            h.update(line.encode("utf-8", "surrogateescape"))
        return h.hexdigest()[:DIGEST_CHARS]

    def file(self, path: str, st: os.stat_result) -> str:
        self.counts["files"] += 1
        self.counts["bytes"] += st.st_size
        if time.time() - st.st_mtime <= RACY_S:
            self.racy = True
        if not self.read:
            return ""
        cached = self.cache.get(path, st)
        if cached is not None:
            return cached
        if self.budget is not None:
            self.budget.spend(st.st_size)  # refused before a byte is read
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                while block := f.read(CHUNK_BYTES):
                    h.update(block)
                    if self.budget is not None:
                        self.budget.check_time()
        except OSError as exc:
            raise DataPathRefused(
                f"cannot read data file {path}: {exc.strerror or exc}",
                hint="make it readable by this user, or leave it out of the input",
                path=path,
            ) from None
        self.counts["files_read"] += 1
        self.counts["bytes_read"] += st.st_size
        digest = h.hexdigest()
        self.cache.put(path, st, digest)
        return digest

    def tree(self, root: str) -> str:
        """sha256 over the sorted listing: one line per file (path, size, digest) and folder."""
        lines: list[str] = []
        visited = {root}
        stack = [(root, "")]
        while stack:
            folder, rel = stack.pop()
            if self.budget is not None:
                self.budget.check_time()
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
                    self._line(lines, f"{name}\0broken-link\n")
                    continue
                if stat.S_ISDIR(st.st_mode):
                    target = os.path.realpath(entry.path) if entry.is_symlink() else entry.path
                    if target in visited:  # a second way into a folder already read
                        same = os.path.relpath(target, root)
                        self._line(lines, f"{name}/\0same-as\0{same}\n")
                        continue
                    visited.add(target)
                    self._line(lines, f"{name}/\n")
                    stack.append((target, name + "/"))
                elif stat.S_ISREG(st.st_mode):
                    real = os.path.realpath(entry.path) if entry.is_symlink() else entry.path
                    self.meta.append(_meta_line(name, st))
                    digest = self.file(real, st)
                    lines.append(f"{name}\0{st.st_size}\0{digest}\n")
                else:  # fifos, sockets, devices: never read (a fifo would block)
                    self._line(lines, f"{name}\0special\n")
        h = hashlib.sha256()
        for line in sorted(lines):
            h.update(line.encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def _line(self, lines: list[str], line: str) -> None:
        """A listing line that is not a file's: the same in the content and metadata views."""
        lines.append(line)
        self.meta.append(line)


def _meta_line(name: str, st: os.stat_result) -> str:
    return f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n"


def fingerprint(path: str | os.PathLike[str], home: Path | None = None) -> Fingerprint:
    """The content digest of a file or folder (symlinks inside followed, each real folder once).

    ``home`` (AIR_HOME) holds the cache; without it every file is read. The input's metadata
    is recorded there under the digest, for ``recheck``.
    """
    real = os.path.realpath(path, strict=True)
    cache = _Cache(home)
    scan = _Scan(cache)
    try:
        digest = scan.digest(real)[:DIGEST_CHARS]
        cache.pending_meta.append((real, digest, scan.signature(), int(scan.racy)))
    finally:
        cache.close()
    fp = Fingerprint(digest=digest, **scan.counts)
    with _recent_lock:
        if len(_recent) > 1024:  # a long-lived process (the MCP server) launches for days
            _recent.clear()
        _recent[(real, fp.digest)] = fp
    return fp


@dataclass(frozen=True)
class Recheck:
    """An input's state at the end of a job, against its digest at launch."""

    state: str  # same | changed | meta-changed (too large to read) | unchecked (too large)
    digest: str | None = None  # the digest now, when its content was read


def recheck(path: str, home: Path | None, before: str, budget: Budget) -> Recheck:
    """Whether the input at ``path`` still has digest ``before``, spending at most ``budget``.

    Metadata first: the same metadata as at launch (recorded by ``fingerprint``, and not racy)
    means the same content, read from nothing. Otherwise the content is hashed within the
    budget; past it, a metadata change is still reported (``meta-changed``), and without
    launch metadata the input is ``unchecked``. OSError and DataPathRefused pass through.
    """
    real = os.path.realpath(path, strict=True)
    cache = _Cache(home)
    try:
        then = cache.meta_of(real, before)
        try:
            walk = _Scan(cache, budget, read=False)
            walk.digest(real)
        except OverBudget:
            return Recheck("unchecked")
        now = walk.signature()
        if then is not None and then[0] == now and not then[1] and not walk.racy:
            return Recheck("same", before)
        try:
            digest = _Scan(cache, budget).digest(real)[:DIGEST_CHARS]
        except OverBudget:
            changed = then is not None and then[0] != now
            return Recheck("meta-changed" if changed else "unchecked")
    finally:
        cache.close()
    return Recheck("same" if digest == before else "changed", digest)
