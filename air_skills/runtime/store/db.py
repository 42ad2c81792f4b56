"""One SQLite connection to AIR_HOME's database: WAL mode, write transactions, busy waits."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from air_skills.errors import StoreError
from air_skills.home import JOB_ID_RE, ensure_home, owner_only
from air_skills.polling import backoff
from air_skills.runtime.store.home_id import check_home_id
from air_skills.runtime.store.schema import SCHEMA_VERSION, migrate

_T = TypeVar("_T")
BUSY_TIMEOUT_S = 60.0  # how long a reader or a writer waits for the database before failing


class Database:
    """The connection and its transaction style; the Store's named changes build on it."""

    def __init__(self, home: Path, *, rebuilding: bool = False) -> None:
        """``rebuilding``: accept a new database beside job folders (runtime/store/rebuild.py)."""
        self.home = ensure_home(home)
        self.path = self.home / "air.db"
        self._owner_only_files()
        try:
            self.conn = sqlite3.connect(
                self.path, timeout=60, isolation_level=None, check_same_thread=False
            )
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            self.conn.execute("PRAGMA synchronous = NORMAL")
            if mode != "wal":
                raise sqlite3.OperationalError(f"journal mode is {mode}, not wal")
            if self.conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                with self.tx() as c:
                    if not rebuilding:
                        self._refuse_lost_records(c)
                    migrate(c)
            try:  # a database copied or restored from another home is refused (home_id.py)
                self.home_id = check_home_id(self.conn, self.tx, self.home, self.path)
            except StoreError:
                self.conn.close()
                raise
            # From here on, waits for the database are ours (_begin_immediate, read): short.
            self.conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.DatabaseError as exc:
            raise self._wrap(exc) from None

    def _owner_only_files(self) -> None:
        """The database (and its WAL files, which SQLite makes with its mode) is owner-only."""
        # Only when it is not there yet: closing any descriptor of the file drops every POSIX
        # lock this process holds on it, and another process's last close would then delete
        # the WAL under this process's open connection (sqlite.org/howtocorrupt.html, 2.2).
        if not self.path.exists():
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass  # made by another process meanwhile
            except OSError:
                return  # a read-only home: the connection says so, with its hint
        owner_only(self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))

    def _refuse_lost_records(self, c: sqlite3.Connection) -> None:
        """A new, empty database beside existing job folders: the records were lost (the file
        truncated or replaced). Saying "no jobs" would hide them, and reuse their ids."""
        if c.execute("SELECT 1 FROM sqlite_master WHERE name='jobs'").fetchone():
            return  # an older schema: migrate it
        folders = [n for n in os.listdir(self.home / "jobs") if JOB_ID_RE.match(n)]
        if folders:
            raise StoreError(
                f"the state database {self.path} is new or empty, but {len(folders)} job"
                f" folders exist in {self.home / 'jobs'}: its records were lost (the file was"
                " truncated, replaced or deleted)",
                hint="restore air.db from a backup, or rebuild the records from the job folders"
                " with `air doctor --rebuild`",
                path=str(self.path),
                job_folders=len(folders),
            )

    def _wrap(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            hint = "AIR_HOME is read-only: set AIR_HOME to a writable folder"
        elif "not a database" in text or "malformed" in text:
            hint = f"the state database {self.path} is corrupt: move it aside and retry"
        elif getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in text:
            return StoreError(
                f"state database {self.path}: the disk is full ({text})",
                code="disk-full",
                hint=f"free space on the disk that holds {self.path.parent}, or move AIR_HOME",
                path=str(self.path),
            )
        elif "locked" in text:
            return StoreError(
                f"state database busy: {text}", hint="retry", retryable=True, path=str(self.path)
            )
        else:
            hint = "check that AIR_HOME is a local, writable folder"
        return StoreError(f"state database {self.path}: {text}", hint=hint, path=str(self.path))

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction, waiting for the write lock as long as it takes."""
        try:
            self._begin_immediate()
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise self._wrap(exc) from None

    @contextmanager
    def _maybe_tx(self, c: sqlite3.Connection | None) -> Iterator[sqlite3.Connection]:
        """The caller's transaction ``c``, or a new one."""
        if c is not None:
            yield c
        else:
            with self.tx() as cx:
                yield cx

    def _begin_immediate(self) -> None:
        """BEGIN IMMEDIATE, waiting for the write lock (see _busy_retry)."""
        self._busy_retry(lambda: self.conn.execute("BEGIN IMMEDIATE"))

    def _busy_retry(self, attempt: Callable[[], _T]) -> _T:
        """``attempt()``, tried again every 50 µs to 1 ms while the database is busy.

        The connection's busy timeout is 0 and this is its wait: SQLite's own busy handler
        sleeps 1, 2, 5, 10 ms... between tries, while a transaction here holds the lock for a
        fraction of a millisecond, so with many processes writing (a supervisor per job) the
        lock would sit idle while everyone sleeps. Gives up after BUSY_TIMEOUT_S.
        """
        error: sqlite3.OperationalError | None = None
        for _ in backoff(
            first_s=50e-6, factor=2.0, cap_s=1e-3, timeout_s=BUSY_TIMEOUT_S, jitter=True
        ):
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if "locked" not in text and "busy" not in text:
                    raise
                error = exc
        assert error is not None  # the first poll ran before any deadline
        raise error

    def read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self._busy_retry(lambda: self.conn.execute(sql, args).fetchall())
        except sqlite3.DatabaseError as exc:
            raise self._wrap(exc) from None
