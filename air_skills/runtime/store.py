"""The state store: SQLite in WAL mode under AIR_HOME, shared by every process.

Every state change is one ``BEGIN IMMEDIATE`` transaction through a named function
(``queue``, ``start``, ``finish``, ``requeue``, ...). Terminal states are guarded by a
conditional update: a write that would leave one changes nothing and reports False.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from air_skills.errors import StoreError
from air_skills.home import LAUNCH_ENV, ensure_home
from air_skills.status import PRIORITY_RANK, JobStatus

if TYPE_CHECKING:
    from air_skills.models import JobInfo, JobSpec

TERMINAL = tuple(s.value for s in JobStatus if s.is_terminal())
_TERMINAL_SQL = "(" + ",".join(f"'{s}'" for s in TERMINAL) + ")"

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT UNIQUE NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    failure_kind TEXT,
    exit_code INTEGER,
    signal TEXT,
    message TEXT NOT NULL DEFAULT '',
    gpus TEXT NOT NULL DEFAULT '[]',
    cpus INTEGER,
    priority INTEGER NOT NULL,
    preemptible INTEGER NOT NULL DEFAULT 0,
    gpus_requested INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    user_retries INTEGER NOT NULL DEFAULT 0,
    infra_retries INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    queued_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    run_id TEXT,
    experiment_id TEXT,
    log_path TEXT,
    backend TEXT NOT NULL DEFAULT 'local',
    backend_ref TEXT,
    project TEXT NOT NULL DEFAULT 'default',
    borrowing INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT UNIQUE,
    supervisor_pid INTEGER,
    supervisor_start TEXT,
    job_pid INTEGER,
    job_start TEXT,
    stop_request TEXT,
    stop_reason TEXT,
    tracking_note TEXT
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);
-- The scheduling pass reads the head of the queue in this order (a window, not all of it).
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(priority DESC, seq) WHERE status='QUEUED';
CREATE INDEX IF NOT EXISTS jobs_queue_cpu ON jobs(priority DESC, seq)
    WHERE status='QUEUED' AND gpus_requested=0;
CREATE TABLE IF NOT EXISTS gpus (
    idx INTEGER PRIMARY KEY,
    cordoned INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    cordoned_at REAL,
    health TEXT NOT NULL DEFAULT 'ok'
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS quotas (
    project TEXT PRIMARY KEY,
    gpus INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idle_supervisors (
    pid INTEGER PRIMARY KEY,
    start TEXT NOT NULL,
    since REAL NOT NULL
);
"""


SCHEMA_VERSION = 4  # raise it with every schema change: older homes gain the new columns


def _schema_columns() -> dict[str, dict[str, str]]:
    """{table: {column: declaration}} as SCHEMA declares them."""
    tables: dict[str, dict[str, str]] = {}
    for block in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", SCHEMA, re.S):
        name, body = block
        cols = {}
        for line in body.strip().splitlines():
            col, _, decl = line.strip().rstrip(",").partition(" ")
            # A column added later cannot be PRIMARY KEY/UNIQUE in SQLite: keep the type.
            cols[col] = decl.replace("PRIMARY KEY AUTOINCREMENT", "").replace("UNIQUE", "")
        tables[name] = cols
    return tables


_T = TypeVar("_T")
BUSY_TIMEOUT_S = 60.0  # how long a reader or a writer waits for the database before failing


def new_job_id() -> str:
    # os.urandom, as secrets.token_hex does; importing secrets would cost every process 5 ms.
    return "job-" + os.urandom(5).hex()


class Store:
    """One connection to AIR_HOME's database; cheap to create, one per process or thread."""

    def __init__(self, home: Path) -> None:
        self.home = ensure_home(home)
        self.path = self.home / "air.db"
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
                self._migrate()
            # From here on, waits for the database are ours (_begin_immediate, read): short.
            self.conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.DatabaseError as exc:
            raise self._wrap(exc) from None

    def _migrate(self) -> None:
        """Create the tables, and add the columns that an older AIR_HOME lacks."""
        with self.tx() as c:
            if c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)
            for table, columns in _schema_columns().items():
                have = {r["name"] for r in c.execute(f"PRAGMA table_info({table})")}
                for name, decl in columns.items():
                    if name not in have:
                        c.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _wrap(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            hint = "AIR_HOME is read-only: set AIR_HOME to a writable folder"
        elif "not a database" in text or "malformed" in text:
            hint = f"the state database {self.path} is corrupt: move it aside and retry"
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
        deadline: float | None = None
        delay = 50e-6
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if "locked" not in text and "busy" not in text:
                    raise
                now = time.monotonic()
                deadline = deadline or now + BUSY_TIMEOUT_S
                if now > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1e-3)

    def read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self._busy_retry(lambda: self.conn.execute(sql, args).fetchall())
        except sqlite3.DatabaseError as exc:
            raise self._wrap(exc) from None

    # --- jobs: creation and reads -------------------------------------------------------

    def queue(
        self,
        spec: JobSpec,
        job_id: str,
        log_path: str,
        name: str,
        run_id: str | None = None,
        experiment_id: str | None = None,
        message: str = "QUEUED: waiting for a scheduling pass",
        tracking_note: str | None = None,
        c: sqlite3.Connection | None = None,
    ) -> tuple[str, bool]:
        """Record a new QUEUED job; with an idempotency key already used, return that job.

        Returns (job_id, created).
        """
        now = time.time()
        with self._maybe_tx(c) as c:
            if spec.idempotency_key:
                row = c.execute(
                    "SELECT job_id FROM jobs WHERE idempotency_key = ?", (spec.idempotency_key,)
                ).fetchone()
                if row:
                    return row["job_id"], False
            c.execute(
                "INSERT INTO jobs (job_id, name, spec, status, priority, preemptible,"
                " gpus_requested, created_at, queued_at, log_path, backend, project,"
                " idempotency_key, message, run_id, experiment_id, tracking_note)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    name,
                    spec.model_dump_json(),
                    JobStatus.QUEUED.value,
                    PRIORITY_RANK[spec.priority],
                    int(spec.preemptible),
                    spec.gpus,
                    now,
                    now,
                    log_path,
                    spec.backend,
                    spec.resolved_project(),
                    spec.idempotency_key,
                    message,
                    run_id,
                    experiment_id,
                    tracking_note,
                ),
            )
            self._event(c, job_id, "queued", "job queued")
        return job_id, True

    def row(self, job_id: str) -> sqlite3.Row | None:
        rows = self.read("SELECT * FROM jobs WHERE job_id = ?", (job_id,))
        return rows[0] if rows else None

    def rows(self, where: str = "", args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self.read(f"SELECT * FROM jobs {where}", args)

    # --- named state changes ------------------------------------------------------------

    def start(
        self, c: sqlite3.Connection, job_id: str, gpus: list[int], cpus: int, borrowing: bool
    ) -> bool:
        """QUEUED -> RUNNING on the given GPUs (inside a scheduling transaction)."""
        cur = c.execute(
            "UPDATE jobs SET status='RUNNING', gpus=?, cpus=?, borrowing=?, started_at=?,"
            " attempts=attempts+1, supervisor_pid=NULL, supervisor_start=NULL, job_pid=NULL,"
            " job_start=NULL, stop_request=NULL, stop_reason=NULL,"
            " message=? WHERE job_id=? AND status='QUEUED'",
            (
                json.dumps(gpus),
                cpus,
                int(borrowing),
                time.time(),
                "RUNNING: starting" + (" (borrowing idle GPUs)" if borrowing else ""),
                job_id,
            ),
        )
        if cur.rowcount:
            self._event(c, job_id, "started", f"started on GPUs {gpus}")
        return bool(cur.rowcount)

    def set_supervisor(
        self,
        job_id: str,
        pid: int | None,
        start: str | None,
        c: sqlite3.Connection | None = None,
        only_if: int | None = None,
    ) -> None:
        """Record a RUNNING job's supervisor (None: none yet); ``only_if`` it is this pid now."""
        guard = " AND supervisor_pid=?" if only_if is not None else ""
        args = (pid, start, job_id) + ((only_if,) if only_if is not None else ())
        with self._maybe_tx(c) as cx:
            cx.execute(
                "UPDATE jobs SET supervisor_pid=?, supervisor_start=? WHERE job_id=?"
                " AND status='RUNNING'" + guard,
                args,
            )

    def set_processes(
        self,
        c: sqlite3.Connection,
        job_id: str,
        supervisor: tuple[int, str],
        job: tuple[int, str] | None,
        message: str,
    ) -> bool:
        """Record the (pid, start time) of a job's supervisor and command, started together.

        Only for a RUNNING job that has no supervisor on record yet; False if it has one.
        """
        cur = c.execute(
            "UPDATE jobs SET supervisor_pid=?, supervisor_start=?, job_pid=?, job_start=?,"
            " message=? WHERE job_id=? AND status='RUNNING' AND supervisor_pid IS NULL",
            (*supervisor, *(job or (None, None)), message, job_id),
        )
        return bool(cur.rowcount)

    def set_running(
        self, job_id: str, pid: int, start: str, message: str, c: sqlite3.Connection | None = None
    ) -> None:
        """Record the (pid, start time) of a RUNNING job's command."""
        with self._maybe_tx(c) as c:
            c.execute(
                "UPDATE jobs SET job_pid=?, job_start=?, message=? WHERE job_id=?"
                " AND status='RUNNING'",
                (pid, start, message, job_id),
            )

    def set_tracking(self, job_id: str, run_id: str | None, experiment_id: str | None) -> None:
        with self.tx() as c:
            c.execute(
                "UPDATE jobs SET run_id=?, experiment_id=? WHERE job_id=?",
                (run_id, experiment_id, job_id),
            )

    def set_message(self, job_id: str, message: str) -> None:
        with self.tx() as c:
            c.execute(
                f"UPDATE jobs SET message=? WHERE job_id=? AND status NOT IN {_TERMINAL_SQL}",
                (message, job_id),
            )

    def set_backend_ref(
        self, job_id: str, ref: str, *, expected: str | None = None, message: str | None = None
    ) -> bool:
        """Record a live job's handle on its backend (for Ray: submission id and address).

        Conditional on the current handle being ``expected``: of two processes that resubmit
        the same job, only one wins. Returns whether it was written.
        """
        with self.tx() as c:
            cur = c.execute(
                "UPDATE jobs SET backend_ref=?, message=coalesce(?, message) WHERE job_id=?"
                f" AND backend_ref IS ? AND status NOT IN {_TERMINAL_SQL}",
                (ref, message, job_id, expected),
            )
            if cur.rowcount:
                self._event(c, job_id, "submitted", f"submitted to the backend as {ref}")
            return bool(cur.rowcount)

    def finish(
        self,
        job_id: str,
        status: JobStatus,
        *,
        message: str,
        exit_code: int | None = None,
        signal: str | None = None,
        failure_kind: str | None = None,
        c: sqlite3.Connection | None = None,
    ) -> bool:
        """Move a live job to a terminal state. False (and nothing written) if it already is."""
        assert status.is_terminal()
        with self._maybe_tx(c) as cx:
            cur = cx.execute(
                "UPDATE jobs SET status=?, message=?, exit_code=?, signal=?, failure_kind=?,"
                f" ended_at=? WHERE job_id=? AND status NOT IN {_TERMINAL_SQL}",
                (status.value, message, exit_code, signal, failure_kind, time.time(), job_id),
            )
            if cur.rowcount:
                self._event(cx, job_id, status.value.lower(), message)
                # The launch environment may hold secrets: an ended job needs it no more.
                (self.home / "jobs" / job_id / LAUNCH_ENV).unlink(missing_ok=True)
            return bool(cur.rowcount)

    def requeue(
        self,
        job_id: str,
        *,
        message: str,
        kind: str,
        c: sqlite3.Connection | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
    ) -> bool:
        """RUNNING -> QUEUED (preempted, retried or infra failure); same id, run and folder.

        ``kind`` is ``preempted``, ``user`` (a retry) or ``infra``.
        """
        counter = {
            "user": ", user_retries=user_retries+1",
            "infra": ", infra_retries=infra_retries+1",
        }
        with self._maybe_tx(c) as cx:
            cur = cx.execute(
                "UPDATE jobs SET status='QUEUED', gpus='[]', queued_at=?, message=?, exit_code=?,"
                " signal=?, failure_kind=?, supervisor_pid=NULL, job_pid=NULL,"
                " stop_request=NULL, stop_reason=NULL, borrowing=0"
                + counter.get(kind, "")
                + " WHERE job_id=? AND status='RUNNING'",
                (
                    time.time(),
                    message,
                    exit_code,
                    signal,
                    "infra" if kind == "infra" else ("user" if kind == "user" else None),
                    job_id,
                ),
            )
            if cur.rowcount:
                self._event(cx, job_id, f"requeued-{kind}", message)
            return bool(cur.rowcount)

    def request_stop(self, c: sqlite3.Connection, job_id: str, kind: str, reason: str) -> bool:
        """Mark a RUNNING job to be stopped (``cancel``, ``preempt`` or ``infra``)."""
        cur = c.execute(
            "UPDATE jobs SET stop_request=?, stop_reason=? WHERE job_id=? AND status='RUNNING'"
            " AND (stop_request IS NULL OR stop_request='preempt')",
            (kind, reason, job_id),
        )
        if cur.rowcount:
            self._event(c, job_id, f"stop-{kind}", reason)
        return bool(cur.rowcount)

    def event(self, job_id: str | None, kind: str, message: str) -> None:
        with self.tx() as c:
            self._event(c, job_id, kind, message)

    def events(self, job_id: str) -> list[sqlite3.Row]:
        return self.read("SELECT * FROM events WHERE job_id=? ORDER BY id", (job_id,))

    @staticmethod
    def _event(c: sqlite3.Connection, job_id: str | None, kind: str, message: str) -> None:
        c.execute(
            "INSERT INTO events (job_id, ts, kind, message) VALUES (?,?,?,?)",
            (job_id, time.time(), kind, message),
        )

    @contextmanager
    def _maybe_tx(self, c: sqlite3.Connection | None) -> Iterator[sqlite3.Connection]:
        if c is not None:
            yield c
        else:
            with self.tx() as cx:
                yield cx

    # --- idle supervisors: one whose job ended waits a while to run the next ---------------

    def add_idle(self, pid: int, start: str, limit: int) -> bool:
        """Join the idle list, unless ``limit`` supervisors are idle already."""
        with self.tx() as c:
            (idle,) = c.execute("SELECT count(*) FROM idle_supervisors").fetchone()
            if idle >= limit:
                return False
            c.execute(
                "INSERT OR REPLACE INTO idle_supervisors (pid, start, since) VALUES (?,?,?)",
                (pid, start, time.time()),
            )
            return True

    def remove_idle(self, pid: int) -> bool:
        """Leave the idle list. False if a pass took this supervisor first: it has a job."""
        with self.tx() as c:
            return bool(c.execute("DELETE FROM idle_supervisors WHERE pid=?", (pid,)).rowcount)

    def claim_idle(
        self, c: sqlite3.Connection, alive: Callable[[int, str], bool] | None = None
    ) -> tuple[int, str] | None:
        """Take an idle supervisor that is still alive (the most recently idle), in a pass.

        ``alive(pid, start)``: the liveness check (default: proc.alive).
        """
        if alive is None:
            from air_skills.runtime.proc import alive

        rows = c.execute("SELECT pid, start FROM idle_supervisors ORDER BY since DESC").fetchall()
        for row in rows:
            c.execute("DELETE FROM idle_supervisors WHERE pid=?", (row["pid"],))
            if alive(row["pid"], row["start"]):
                return row["pid"], row["start"]
        return None

    # --- GPUs, quotas, settings ------------------------------------------------------------

    def gpu_rows(self) -> dict[int, sqlite3.Row]:
        return {r["idx"]: r for r in self.read("SELECT * FROM gpus")}

    def cordon(self, index: int, reason: str, health: str = "ok") -> None:
        with self.tx() as c:
            c.execute(
                "INSERT INTO gpus (idx, cordoned, reason, cordoned_at, health) VALUES (?,1,?,?,?)"
                " ON CONFLICT(idx) DO UPDATE SET cordoned=1, reason=excluded.reason,"
                " cordoned_at=excluded.cordoned_at, health=excluded.health",
                (index, reason, time.time(), health),
            )
            self._event(c, None, "cordon", f"GPU {index} cordoned: {reason}")

    def uncordon(self, index: int, note: str = "") -> None:
        with self.tx() as c:
            c.execute(
                "INSERT INTO gpus (idx, cordoned, reason, cordoned_at, health) VALUES"
                " (?,0,NULL,NULL,'ok') ON CONFLICT(idx) DO UPDATE SET cordoned=0, reason=NULL,"
                " cordoned_at=NULL, health='ok'",
                (index,),
            )
            self._event(c, None, "uncordon", f"GPU {index} uncordoned {note}".strip())

    def quotas(self) -> dict[str, int]:
        return {r["project"]: r["gpus"] for r in self.read("SELECT * FROM quotas")}

    def set_quota(self, project: str, gpus: int) -> None:
        with self.tx() as c:
            c.execute(
                "INSERT INTO quotas (project, gpus) VALUES (?,?)"
                " ON CONFLICT(project) DO UPDATE SET gpus=excluded.gpus",
                (project, gpus),
            )

    def setting(self, key: str) -> str | None:
        rows = self.read("SELECT value FROM settings WHERE key=?", (key,))
        return rows[0]["value"] if rows else None

    def set_setting(self, key: str, value: str) -> None:
        with self.tx() as c:
            c.execute(
                "INSERT INTO settings (key, value) VALUES (?,?)"
                " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, value),
            )


def row_to_info(row: sqlite3.Row) -> JobInfo:
    from air_skills.models import JobInfo, utc_from_ts

    rank_to_name = {v: k for k, v in PRIORITY_RANK.items()}
    return JobInfo(
        job_id=row["job_id"],
        name=row["name"],
        status=JobStatus(row["status"]),
        failure_kind=row["failure_kind"],
        exit_code=row["exit_code"],
        signal=row["signal"],
        message=row["message"]
        + (f" ({row['tracking_note']})" if row["tracking_note"] and not row["run_id"] else ""),
        gpus=json.loads(row["gpus"]),
        priority=rank_to_name[row["priority"]],  # type: ignore[arg-type]
        attempts=row["attempts"],
        created_at=utc_from_ts(row["created_at"]),  # type: ignore[arg-type]
        started_at=utc_from_ts(row["started_at"]),
        ended_at=utc_from_ts(row["ended_at"]),
        run_id=row["run_id"],
        experiment_id=row["experiment_id"],
        log_path=row["log_path"],
        backend=row["backend"],
        project=row["project"],
        borrowing=bool(row["borrowing"]),
        data=_data_refs(row["spec"]),
    )


def _data_refs(spec_json: str) -> list[str]:
    data = json.loads(spec_json).get("data")
    if not data:
        return []
    from air_skills.tracking.data import data_refs

    return data_refs(data)
