"""Governed data inputs: checked against AIR_DATA_ROOTS, given to the job, fingerprinted.

A job's ``data`` is a list of ``{name, path}``. At launch each path is resolved to its real
path (symlinks and ``..`` followed) and compared component by component with the real paths
of the roots in ``AIR_DATA_ROOTS`` (an ``os.pathsep`` list); a path outside them, a missing
path, or a folder holding a symlink that leads outside them is refused before anything is
created. With ``AIR_DATA_ROOTS`` unset, every data input is refused (there is no implicit
root: a job's workdir is whatever the caller says, so it cannot be a boundary).

Each input is fingerprinted: the sha256 of a file's content, or for a folder the sha256 of
its sorted listing (path, size, content digest of every file), cut to 32 hex characters
(MLflow keeps at most 36). File digests are cached in ``AIR_HOME/fingerprints.db`` by real
path, size, modification time and inode, so a large folder is read once and then only
``stat``-ed; a file modified within the last ``RACY_S`` seconds is never cached (its
timestamp could still match a later write). The job gets ``$AIR_DATA_DIR/<name>``, a symlink
to the real path; the digest and source go to its MLflow run as a dataset input; at exit the
inputs are fingerprinted again and a change is reported in the job's message.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from air_skills.errors import DataPathRefused, InvalidInput, TrackingUnavailable

if TYPE_CHECKING:
    from air_skills.models import DataInput

ROOTS_ENV = "AIR_DATA_ROOTS"
DIGEST_CHARS = 32  # of a sha256 hex digest: MLflow's dataset digest holds at most 36
RACY_S = 2.0  # files modified this recently are re-read every time, never cached
CHUNK_BYTES = 1 << 20
CONTEXT_TAG = "mlflow.data.context"

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


@dataclass(frozen=True)
class ResolvedInput:
    name: str
    path: str  # as given
    real: str  # the real path: symlinks and ``..`` resolved


# --- roots and resolution --------------------------------------------------------------------


def allowed_roots(value: str | None = None) -> list[Path]:
    """The real paths of the roots in ``AIR_DATA_ROOTS`` (or ``value``); relative entries are
    taken from the current folder, empty entries ignored."""
    raw = os.environ.get(ROOTS_ENV, "") if value is None else value
    roots: list[Path] = []
    for entry in raw.split(os.pathsep):
        entry = entry.strip()
        if not entry:
            continue
        real = Path(os.path.realpath(os.path.expanduser(entry)))
        if real not in roots:
            roots.append(real)
    return roots


def is_under(path: str | Path, roots: Iterable[Path]) -> bool:
    """Whether ``path`` (a real path) is one of ``roots`` or inside one, by whole components."""
    parts = Path(path).parts
    return any(parts[: len(r.parts)] == r.parts for r in roots)


def _roots_text(roots: list[Path]) -> str:
    return ", ".join(str(r) for r in roots) if roots else f"none ({ROOTS_ENV} is not set)"


def _refuse(problems: list[str], roots: list[Path]) -> DataPathRefused:
    if roots:
        hint = (
            "put (or link) the data under one of the allowed roots, or add its folder to"
            f" {ROOTS_ENV} ({os.pathsep}-separated), then relaunch"
        )
    else:
        hint = (
            f"set {ROOTS_ENV} to the folders that hold your data (e.g. export"
            f" {ROOTS_ENV}=/data{os.pathsep}/scratch/datasets), then relaunch"
        )
    exc = DataPathRefused(
        f"data inputs refused, nothing launched (allowed roots: {_roots_text(roots)}): "
        + "; ".join(problems),
        hint=hint,
        problems=problems,
        roots=[str(r) for r in roots],
    )
    exc.problems = problems  # type: ignore[attr-defined]  # listed one per line by the CLI
    return exc


def _field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)


def resolve_inputs(
    data: Iterable[Any],
    workdir: str | os.PathLike[str] | None = None,
    roots: list[Path] | None = None,
    deep: bool = True,
) -> list[ResolvedInput]:
    """Resolve every input and check it against the roots; raise one DataPathRefused that
    lists every problem. Relative paths are taken from ``workdir`` (default: the current
    folder). With ``deep``, the symlinks inside a folder are checked too."""
    roots = allowed_roots() if roots is None else roots
    base = Path(workdir) if workdir else Path.cwd()
    problems: list[str] = []
    out: list[ResolvedInput] = []
    for item in data:
        name, path = str(_field(item, "name")), str(_field(item, "path"))
        problem = _check_one(name, path, base, roots, out, deep)
        if problem:
            problems.append(problem)
    if problems:
        raise _refuse(problems, roots)
    return out


def _check_one(
    name: str, path: str, base: Path, roots: list[Path], out: list[ResolvedInput], deep: bool
) -> str | None:
    if "\x00" in path:
        return f"{name}: the path holds a NUL byte"
    given = base / os.path.expanduser(path)
    lexical = os.path.normpath(given)
    try:
        real = os.path.realpath(given, strict=True)
    except FileNotFoundError:
        return f"{name}: {path} does not exist"
    except OSError as exc:  # a symlink loop, a component that is not a folder, no permission
        return f"{name}: {path} cannot be resolved ({exc.strerror or exc})"
    if not roots:
        return f"{name}: {path} refused ({ROOTS_ENV} is not set)"
    if not is_under(real, roots):
        how = "" if real == lexical else f" resolves to {real} (through a symlink or '..') and"
        return f"{name}: {path}{how} is outside the allowed roots"
    mode = os.stat(real).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return f"{name}: {path} is neither a file nor a folder"
    if deep and stat.S_ISDIR(mode):
        escape = _find_escape(real, roots)
        if escape:
            return f"{name}: {path} holds a symlink {escape}, outside the allowed roots"
    out.append(ResolvedInput(name=name, path=path, real=real))
    return None


def _find_escape(folder: str, roots: list[Path]) -> str | None:
    """The first symlink under ``folder`` whose target lies outside the roots, as text."""
    stack = [folder]
    seen = {folder}
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue  # unreadable folders are reported when the fingerprint reads them
        for entry in entries:
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                if not is_under(target, roots):
                    return f"{os.path.relpath(entry.path, folder)} -> {target}"
                if os.path.isdir(target) and target not in seen:
                    seen.add(target)
                    stack.append(target)
            elif entry.is_dir(follow_symlinks=False) and entry.path not in seen:
                seen.add(entry.path)
                stack.append(entry.path)
    return None


# --- fingerprints ------------------------------------------------------------------------------


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


# --- launch: prepare, link, log ------------------------------------------------------------------


def prepare_inputs(
    data: Iterable[Any], home: Path | None, workdir: str | os.PathLike[str] | None = None
) -> list[DataInput]:
    """Resolve, check and fingerprint every input; returns them with real paths and digests.

    An input given with a ``digest`` is refused unless the data still has it (a prefix of the
    digest is enough): a relaunch can pin the exact version of its data.
    """
    from air_skills.models import DataInput

    items = list(data)
    resolved = resolve_inputs(items, workdir)
    out: list[DataInput] = []
    mismatches: list[str] = []
    for item, res in zip(items, resolved, strict=True):
        fp = fingerprint(res.real, home)
        pinned = _field(item, "digest")
        if pinned and not fp.digest.startswith(pinned):
            mismatches.append(f"{res.name}: {res.real} is now {fp.digest}, not {pinned}")
        out.append(DataInput(name=res.name, path=res.real, digest=fp.digest))
    if mismatches:
        raise InvalidInput(
            "data inputs changed since their pinned digest, nothing launched: "
            + "; ".join(mismatches),
            code="data-digest-mismatch",
            hint="drop the digest to use the data as it is now, or restore that version",
            problems=mismatches,
        )
    return out


def link_inputs(data: Iterable[Any], data_dir: Path, workdir: str | None = None) -> None:
    """Expose each input at ``data_dir/<name>``: a symlink to its real path (checked again)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for res in resolve_inputs(data, workdir, deep=False):  # deep-checked by prepare_inputs
        link = data_dir / res.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(res.real, target_is_directory=os.path.isdir(res.real))


def log_inputs(tracker: Any, run_id: str, data: Iterable[Any], context: str = "input") -> None:
    """Log each input to the run as an MLflow dataset input (name, digest, local source)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = []
    for item in data:
        name, path = str(_field(item, "name")), str(_field(item, "path"))
        digest = _field(item, "digest")
        real = os.path.realpath(path)
        with _recent_lock:
            fp = _recent.get((real, digest)) if digest else None
        if fp is None:
            fp = fingerprint(real, getattr(tracker, "home", None))
        profile = {"files": fp.files, "bytes": fp.bytes}
        dataset = Dataset(
            name=name,
            digest=fp.digest,
            source_type="local",
            source=json.dumps({"uri": real}),
            profile=json.dumps(profile),
        )
        tags = [InputTag(CONTEXT_TAG, context), InputTag("air.data.name", name)]
        inputs.append(DatasetInput(dataset=dataset, tags=tags))
    if not inputs:
        return
    try:
        tracker.client.log_inputs(run_id, datasets=inputs)
    except TrackingUnavailable:
        raise
    except Exception as exc:
        raise TrackingUnavailable(
            f"cannot log data inputs to MLflow run {run_id}: {str(exc)[:200]}",
            hint="the job runs; its data lineage is missing from MLflow",
        ) from None


# --- exit: did the inputs change? --------------------------------------------------------------


def exit_note(home: Path, data: list[dict[str, Any]], run_id: str | None) -> str:
    """Fingerprint the inputs again at exit; a text for the job's message if any changed.

    A changed input is also logged to the run as a dataset input with context
    ``changed-during-run``, so MLflow shows both versions.
    """
    changes: list[str] = []
    changed: list[dict[str, Any]] = []
    for item in data:
        before = item.get("digest")
        if not before:
            continue
        try:
            now = fingerprint(item["path"], home).digest
        except (OSError, DataPathRefused):
            changes.append(f"{item['name']} is gone or unreadable")
            continue
        if now != before:
            changes.append(f"{item['name']} {before[:12]} -> {now[:12]}")
            changed.append({**item, "digest": now})
    if not changes:
        return ""
    if changed and run_id:
        try:
            from air_skills.tracking.mlflow import MlflowTracker

            log_inputs(MlflowTracker(home), run_id, changed, context="changed-during-run")
        except Exception:
            pass  # the message below still says it
    return (
        " (data inputs changed during the job: " + "; ".join(changes) + "; the run logged the"
        " launch version, so results may not match it)"
    )


def data_refs(data: Iterable[Any]) -> list[str]:
    """Compact ``name@digest12`` references, for JobInfo."""
    return [f"{_field(d, 'name')}@{(_field(d, 'digest') or '?')[:12]}" for d in data]
