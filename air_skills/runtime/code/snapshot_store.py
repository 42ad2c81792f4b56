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
import itertools
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from air_skills.errors import InvalidInput
from air_skills.home import refuse_unsafe_home

RACY_S = 2.0
CHUNK_BYTES = 1 << 20
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
READ_TRIES = 2  # a file that changes while read is read again once, then refused
# Reading, hashing and copying release the GIL: threads overlap them (and the filesystem's
# per-file latency) where there are cores; a handful of files is not worth a pool.
WORKERS = min(8, os.cpu_count() or 1)
POOL_FROM_FILES = 32
BATCHES_PER_WORKER = 4  # small enough that a slow file does not hold up the rest
T = TypeVar("T")
R = TypeVar("R")


def parallel_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, on ``WORKERS`` threads for many items; the first error
    raised is raised here. Items go to the threads in batches (a few per thread): a future
    per file cost more than a small file's read on a loaded machine."""
    if len(items) < POOL_FROM_FILES or WORKERS < 2:
        return [fn(x) for x in items]
    size = -(-len(items) // (WORKERS * BATCHES_PER_WORKER))
    batches = [items[i : i + size] for i in range(0, len(items), size)]
    from concurrent.futures import ThreadPoolExecutor  # with logging: not for a small tree

    with ThreadPoolExecutor(WORKERS) as pool:
        done = pool.map(lambda batch: [fn(x) for x in batch], batches)
        return [r for batch in done for r in batch]


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
            code_root(home).mkdir(parents=True, exist_ok=True, mode=0o700)
            conn = sqlite3.connect(code_root(home) / "stat_cache.db", timeout=30)
            conn.execute("PRAGMA journal_mode = WAL")
            # No fsync per commit: a commit lost to a power cut only costs a re-read (WAL with
            # NORMAL never corrupts the file), and a cold snapshot commits once per launch.
            conn.execute("PRAGMA synchronous = NORMAL")
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
    return (before.st_size, before.st_mtime_ns, before.st_ctime_ns, before.st_ino) != (
        after.st_size,
        after.st_mtime_ns,
        after.st_ctime_ns,
        after.st_ino,
    )


_OPEN_SRC = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW  # a file swapped for a link is a change
_OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_TMP_PREFIX = f"{os.getpid()}-{secrets.token_hex(4)}-"
_tmp_names = itertools.count()  # next() on a count is atomic: safe on the pool's threads
_made_dirs: set[str] = set()  # blob folders this process has made (or found)


def prepare_store(home: Path) -> None:
    """Make the store's temp folder once per snapshot (not once per file read)."""
    (code_root(home) / "tmp").mkdir(parents=True, exist_ok=True)


def view_mode(st_mode: int) -> int:
    """A view file's mode: only the executable bit is kept (as in the manifest)."""
    return 0o755 if st_mode & 0o111 else 0o644


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unlink(path: str | None) -> None:
    if path is not None:
        with suppress(FileNotFoundError):
            os.unlink(path)


def hash_file(
    home: Path,
    path: str,
    rel: str,
    keep: bool,
    view: str | None = None,
    listed: os.stat_result | None = None,
) -> tuple[str, os.stat_result]:
    """(sha256, stat) of the file at ``path``, read once; with ``keep`` its content becomes a
    blob, and with ``view`` the same bytes also go to that (private, writable) file.

    ``listed``: the file's ``lstat`` from the listing, which stands for the stat before the
    first read. Refuses a file that changes while it is read (after ``READ_TRIES`` reads);
    a file deleted meanwhile raises FileNotFoundError and leaves neither blob nor view file.
    ``prepare_store`` must have run (with ``keep``), and ``view``'s folder must exist.
    """
    for attempt in range(READ_TRIES):
        try:
            src = os.open(path, _OPEN_SRC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                continue  # it became a symlink since it was listed
            raise
        tmp = data = None
        try:
            before = listed if attempt == 0 and listed is not None else os.fstat(src)
            if before.st_size < CHUNK_BYTES:  # in memory: hashed before anything is written
                data = _read_all(src, before.st_size)
                sha = hashlib.sha256(data).hexdigest()
            else:  # streamed: the blob's temp file and the view written as it is read
                sha, tmp = _stream(home, src, keep, view, view_mode(before.st_mode))
        finally:
            os.close(src)
        try:
            after = os.lstat(path)
        except FileNotFoundError:
            _unlink(tmp)
            _unlink(view)
            raise
        if _changed(before, after):
            _unlink(tmp)
            _unlink(view)  # made again from the next read, with that read's mode
            continue
        if data is None:
            if tmp:
                _publish(home, tmp, sha)
            return sha, after
        if keep and not os.path.exists(_blob_str(home, sha)):  # stored: no write, no rename
            tmp = _new_temp(home)
            _write_new(tmp, data, 0o444, exclusive=True)
            _publish(home, tmp, sha)
        if view is not None:
            _write_new(view, data, view_mode(after.st_mode))
        return sha, after
    _unlink(view)
    raise InvalidInput(
        f"{rel} changed while it was read for the code snapshot (twice): nothing was launched",
        hint="launch again when the file is no longer being written, or list it in .airignore",
        path=rel,
    )


def _read_all(fd: int, size: int) -> bytes:
    """The rest of ``fd``: one read for a file of ``size`` bytes (a short read of a regular
    file is its end; the stat after the read catches a file that grew meanwhile)."""
    want, chunks = size + 1, []
    while chunk := os.read(fd, want):
        chunks.append(chunk)
        if len(chunk) < want:
            break
        want = CHUNK_BYTES
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _stream(
    home: Path, src: int, keep: bool, view: str | None, mode: int
) -> tuple[str, str | None]:
    """(sha256, blob temp file) of a big file, read in chunks that also go to the view."""
    digest, tmp, outs = hashlib.sha256(), None, []
    try:
        if keep:
            tmp = _new_temp(home)
            outs.append(os.open(tmp, _OPEN_NEW | os.O_EXCL, 0o444))
        if view is not None:
            outs.append(os.open(view, _OPEN_NEW, mode))
        while chunk := os.read(src, CHUNK_BYTES):
            digest.update(chunk)
            for out in outs:
                _write_all(out, chunk)
    except BaseException:
        _unlink(tmp)
        raise
    finally:
        for out in outs:
            os.close(out)
    return digest.hexdigest(), tmp


def _new_temp(home: Path) -> str:
    return os.path.join(home, "code", "tmp", f"{_TMP_PREFIX}{next(_tmp_names)}")


def _write_new(path: str, data: bytes, mode: int, exclusive: bool = False) -> None:
    """Write ``data`` to a new file (a blob's temp file is created read-only: blobs are never
    written again, and no chmod is needed)."""
    fd = os.open(path, _OPEN_NEW | (os.O_EXCL if exclusive else 0), mode)
    try:
        _write_all(fd, data)
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    os.close(fd)


def _blob_str(home: Path, sha: str) -> str:
    return os.path.join(home, "code", "blobs", sha[:2], sha)  # blob_path, without Paths


def _publish(home: Path, tmp: str, sha: str) -> None:
    """Move a finished (read-only) temp file to its blob path, atomically: a reader sees the
    whole blob or none. A blob already there holds the same bytes, so replacing it is safe and
    costs one rename instead of a stat and an unlink."""
    dest = _blob_str(home, sha)
    parent = os.path.dirname(dest)
    if parent not in _made_dirs:
        os.makedirs(parent, exist_ok=True)
        _made_dirs.add(parent)
    try:
        os.replace(tmp, dest)
    except FileNotFoundError:  # the store was removed and made again since: make the folder
        os.makedirs(parent, exist_ok=True)
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


def _copy(src: str, dst: str, size: int, mode: int) -> None:
    """Copy a blob (``size`` bytes, immutable) to a new file: two opens and, on Linux, one
    ``copy_file_range`` in the kernel; none of ``shutil.copyfile``'s extra stats or a chmod."""
    s = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        d = os.open(dst, _OPEN_NEW, mode)
        try:
            done = 0
            while done < size:
                try:
                    n = os.copy_file_range(s, d, size - done)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                        raise
                    n = 0
                if n == 0:  # no in-kernel copy here: read and write what is left
                    while chunk := os.read(s, CHUNK_BYTES):
                        _write_all(d, chunk)
                    break
                done += n
        finally:
            os.close(d)
    finally:
        os.close(s)


def build_view(
    home: Path,
    manifest: Mapping[str, Any],
    dest: Path,
    overrides: Mapping[str, bytes | None] | None = None,
    present: Collection[str] = (),
) -> str:
    """Write the snapshot's files into ``dest`` (the job's private, writable copy).

    ``overrides`` (a patch's result) replaces a file's content, adds a file, or (None) drops
    it. ``present``: files already in ``dest`` with the manifest's bytes (written by the
    snapshot from the bytes it read, see ``hash_file``), left as they are. Returns the copy
    path that ran: ``reflink`` (FICLONE), ``copy`` (``copy_file_range`` in the kernel), or
    ``written`` when every file was already present.
    """
    refuse_unsafe_home(home)  # the blobs copied here are the code the job runs
    overrides = dict(overrides or {})
    files: dict[str, dict[str, Any]] = manifest["files"]
    links: dict[str, str] = manifest.get("symlinks", {})
    copies = [(r, e) for r, e in files.items() if r not in overrides and r not in present]
    wanted = (
        {r for r, _ in copies} | set(links) | {p for p, v in overrides.items() if v is not None}
    )
    for folder in sorted({os.path.dirname(p) for p in wanted} - {""}):
        (dest / folder).mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    method = "copy" if copies else "written"
    if copies:  # the first file tells whether the filesystem clones
        rel, entry = copies[0]
        if _reflink(str(blob_path(home, entry["sha256"])), str(dest / rel)):
            method = "reflink"

    def copy(item: tuple[str, dict[str, Any]], cloned: bool = False) -> None:
        rel, entry = item
        src, dst = str(blob_path(home, entry["sha256"])), str(dest / rel)
        mode = view_mode(entry.get("mode", 0o644))
        if cloned or (method == "reflink" and _reflink(src, dst)):
            if mode & 0o111:
                os.chmod(dst, mode)
        else:
            _copy(src, dst, entry["size"], mode)

    if copies:
        copy(copies[0], cloned=method == "reflink")
    parallel_map(copy, copies[1:])
    for rel, content in overrides.items():
        if content is None:
            with suppress(FileNotFoundError):
                os.unlink(dest / rel)  # present: the snapshot wrote it before the patch
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
    refuse_unsafe_home(home)  # stat cache and blobs: what a launch will trust
    code_root(home).mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(code_root(home) / "gc.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
