"""The home's identity: a random id kept both in the state database (a settings row) and in a
file beside it, so that a database from another home (copied or restored into this one) is
told apart from this home's own, and refused before it hides the job folders here."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from air_skills.errors import StoreError
from air_skills.runtime.results.folder_files import Unreadable, read_regular

HOME_ID_FILE = "home_id"  # in AIR_HOME, owner-only
HOME_ID_KEY = "home_id"  # its settings row in air.db
_ID = re.compile(r"^[0-9a-f]{32}$")

Tx = Callable[[], AbstractContextManager[sqlite3.Connection]]


def read_home_id(home: Path) -> str | None:
    """The id in the home's file; None when there is none (or it is not an id)."""
    try:
        text = read_regular(home / HOME_ID_FILE, 256).decode("ascii", "replace").strip()
    except Unreadable:
        return None
    return text if _ID.match(text) else None


def db_home_id(conn: sqlite3.Connection) -> str | None:
    """The id the database was made for; None for a database made before ids (or empty)."""
    try:
        row = conn.execute("SELECT value FROM settings WHERE key = ?", (HOME_ID_KEY,)).fetchone()
    except sqlite3.OperationalError:  # no settings table: not migrated
        return None
    return str(row[0]) if row else None


def write_home_id(home: Path, value: str) -> str:
    """Write the home's id file unless one is there (atomic: a private temporary file linked
    into place); returns the id the file holds afterwards."""
    tmp = home / f".{HOME_ID_FILE}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (value + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, home / HOME_ID_FILE)
    except FileExistsError:
        pass  # another process was first, or an unreadable file is there: read it back
    finally:
        os.unlink(tmp)
    return read_home_id(home) or value


def check_home_id(conn: sqlite3.Connection, tx: Tx, home: Path, db_path: Path) -> str:
    """Give a database without an id the home's (or a new one), write the file when it is
    missing, and refuse a database whose id is another home's. Returns the home's id."""
    file_id = read_home_id(home)
    db_id = db_home_id(conn)
    if db_id is None:
        with tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO settings (key, value) VALUES (?, ?)",
                (HOME_ID_KEY, file_id or os.urandom(16).hex()),
            )
        db_id = db_home_id(conn) or ""
    if file_id is None:
        file_id = write_home_id(home, db_id)
    if db_id != file_id:
        raise other_home_error(db_path, db_id, file_id)
    return file_id


def other_home_error(db_path: Path, db_id: str, file_id: str) -> StoreError:
    return StoreError(
        f"the state database {db_path} belongs to another home (its id {db_id[:12]}, this"
        f" home's {file_id[:12]} in {db_path.parent / HOME_ID_FILE}): it was copied or"
        " restored from elsewhere, and its records are not the job folders here",
        hint="put this home's own air.db back, or rebuild the records from the job folders"
        " with `air doctor --rebuild` (it moves that database aside; --dry-run shows the plan)",
        path=str(db_path),
        other_home=True,
    )
