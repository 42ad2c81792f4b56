"""The store's named reads of jobs (and of their events) for the client, the backends and
`air doctor`: whole records, live and running jobs, pages, supervisor pids; no writes."""

from __future__ import annotations

import sqlite3
from typing import Any

from air_skills.runtime.store.db import Database
from air_skills.runtime.store.records import JOB_COLUMNS, JobRecord, record_in_home


class JobReads(Database):
    """Named reads of the jobs table (and the events a job left), each one query."""

    def row(self, job_id: str) -> JobRecord | None:
        rows = self.rows("WHERE job_id = ?", (job_id,))
        return rows[0] if rows else None

    def rows(self, where: str = "", args: tuple[Any, ...] = ()) -> list[JobRecord]:
        """Whole job records, selected by ``where`` (SQL after the FROM clause)."""
        return [self._record(r) for r in self.read(f"SELECT {JOB_COLUMNS} FROM jobs {where}", args)]

    def _record(self, row: Any) -> JobRecord:
        return record_in_home(row, self.home)  # its log: its own folder's, never the db's

    def events(self, job_id: str) -> list[sqlite3.Row]:
        return self.read("SELECT * FROM events WHERE job_id=? ORDER BY id", (job_id,))

    # --- named reads for the client and the backends ----------------------------------------

    def by_idempotency_key(self, key: str) -> JobRecord | None:
        """The job launched with this idempotency key, if any."""
        rows = self.rows("WHERE idempotency_key=?", (key,))
        return rows[0] if rows else None

    def row_in(self, c: sqlite3.Connection, job_id: str) -> JobRecord | None:
        """The job's record read inside the caller's transaction ``c``."""
        row = c.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return self._record(row) if row is not None else None

    def live_backends(self) -> list[str]:
        """The backends that hold QUEUED or RUNNING jobs, sorted."""
        rows = self.read("SELECT DISTINCT backend FROM jobs WHERE status IN ('QUEUED','RUNNING')")
        return sorted(r["backend"] for r in rows)

    def live_rows(self, backend: str | None = None) -> list[JobRecord]:
        """QUEUED and RUNNING jobs (of one backend, or all), oldest first."""
        if backend is None:
            return self.rows("WHERE status IN ('QUEUED','RUNNING') ORDER BY seq")
        return self.rows(
            "WHERE backend=? AND status IN ('QUEUED','RUNNING') ORDER BY seq", (backend,)
        )

    def supervisor_pids(self) -> set[int]:
        """The pids of every supervisor on record, running a job or idle."""
        rows = self.read(
            "SELECT supervisor_pid AS pid FROM jobs WHERE status='RUNNING'"
            " AND supervisor_pid IS NOT NULL UNION SELECT pid FROM idle_supervisors"
        )
        return {r["pid"] for r in rows}

    def running_rows(self, backend: str | None = None) -> list[JobRecord]:
        """RUNNING jobs (of one backend, or all)."""
        if backend is None:
            return self.rows("WHERE status='RUNNING'")
        return self.rows("WHERE status='RUNNING' AND backend=?", (backend,))

    def page_rows(
        self,
        *,
        status: str | None = None,
        experiment: str | None = None,
        project: str | None = None,
        before_seq: int | None = None,
        limit: int = 50,
        launched_by: str | None = None,
    ) -> list[JobRecord]:
        """Jobs newest first, filtered; ``before_seq`` pages on from a cursor."""
        where, args = self._page_filter(status, experiment, project, before_seq, launched_by)
        return self.rows(f"WHERE {where} ORDER BY seq DESC LIMIT ?", (*args, limit))

    def page_count(
        self,
        *,
        status: str | None = None,
        experiment: str | None = None,
        project: str | None = None,
        launched_by: str | None = None,
    ) -> int:
        """How many jobs ``page_rows`` would page through with these filters (all pages)."""
        where, args = self._page_filter(status, experiment, project, None, launched_by)
        return int(self.read(f"SELECT COUNT(*) AS n FROM jobs WHERE {where}", tuple(args))[0]["n"])

    @staticmethod
    def _page_filter(
        status: str | None,
        experiment: str | None,
        project: str | None,
        before_seq: int | None,
        launched_by: str | None,
    ) -> tuple[str, list[Any]]:
        filters = (
            ("launched_by=?", launched_by),
            ("status=?", status),
            ("json_extract(spec, '$.experiment') IS ?", experiment),
            ("project=?", project),
            ("seq < ?", before_seq),
        )
        given = [(sql, value) for sql, value in filters if value is not None]
        where = ["1=1", *(sql for sql, _ in given)]
        return " AND ".join(where), [value for _, value in given]

    def job_projects(self) -> list[str]:
        """Every project that has a job, in any status."""
        return [r["project"] for r in self.read("SELECT DISTINCT project FROM jobs")]

    def events_since(self, kind: str, since: float) -> list[sqlite3.Row]:
        """Events of ``kind`` (any job) newer than ``since`` (epoch seconds), oldest first."""
        return self.read("SELECT * FROM events WHERE kind=? AND ts > ? ORDER BY id", (kind, since))
