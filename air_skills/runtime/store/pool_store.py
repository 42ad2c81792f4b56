"""The store's state beside the jobs: GPU cordons, quotas, settings and idle supervisors."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from air_skills.runtime.store.db import Database


class PoolStore(Database):
    """Named reads and changes of the GPU pool's state; the Store adds the jobs'."""

    @staticmethod
    def _event(c: sqlite3.Connection, job_id: str | None, kind: str, message: str) -> None:
        """Append to the event log (jobs' and the pool's), inside ``c``."""
        c.execute(
            "INSERT INTO events (job_id, ts, kind, message) VALUES (?,?,?,?)",
            (job_id, time.time(), kind, message),
        )

    # --- idle supervisors: one whose job ended waits a while to run the next ---------------

    def add_idle(self, pid: int, start: str, limit: int, tracking: bool = False) -> bool:
        """Join the idle list, unless ``limit`` supervisors are idle already (``pid`` aside).

        ``tracking``: it has MLflow loaded (a tracked job's run and relay need no import).
        """
        with self.tx() as c:
            (idle,) = c.execute(
                "SELECT count(*) FROM idle_supervisors WHERE pid!=?", (pid,)
            ).fetchone()
            if idle >= limit:
                return False
            c.execute(
                "INSERT OR REPLACE INTO idle_supervisors (pid, start, since, tracking)"
                " VALUES (?,?,?,?)",
                (pid, start, time.time(), int(tracking)),
            )
            return True

    def idle_tracking(self) -> int:
        """How many idle supervisors have MLflow loaded."""
        return self.read("SELECT count(*) FROM idle_supervisors WHERE tracking=1")[0][0]

    def remove_idle(self, pid: int) -> bool:
        """Leave the idle list. False if a pass took this supervisor first: it has a job."""
        with self.tx() as c:
            return bool(c.execute("DELETE FROM idle_supervisors WHERE pid=?", (pid,)).rowcount)

    def claim_idle(
        self,
        c: sqlite3.Connection,
        alive: Callable[[int, str], bool] | None = None,
        tracked: bool = False,
    ) -> tuple[int, str] | None:
        """Take an idle supervisor that is still alive (the most recently idle), in a pass.

        ``alive(pid, start)``: the liveness check (default: proc.alive). ``tracked``: the job
        has an MLflow run; one with MLflow loaded goes first (its run and a sandboxed job's
        metric relay need no import: seconds), and an untracked job leaves those to others.
        """
        if alive is None:
            from air_skills.runtime.process.proc import alive

        rows = c.execute(
            "SELECT pid, start FROM idle_supervisors ORDER BY tracking=? DESC, since DESC",
            (int(tracked),),
        ).fetchall()
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
