"""The store's record of spare MLflow runs: made ahead by processes that have MLflow loaded,
claimed by launches in their queue transaction (pure SQLite), see runtime/runs/spare_runs.py."""

from __future__ import annotations

import sqlite3
import time

from air_skills.runtime.store.pool_store import PoolStore


class SpareStore(PoolStore):
    """Named reads and changes of the spare runs and of the pools that launches want."""

    def spare_candidates(self, uri: str, experiment: str, limit: int = 8) -> list[sqlite3.Row]:
        """Spare runs of one pool (a read: a launch checks them, then claims one in its tx)."""
        return self.read(
            "SELECT run_id, experiment_id FROM spare_runs WHERE uri=? AND experiment=?"
            " ORDER BY created_at LIMIT ?",
            (uri, experiment, limit),
        )

    @staticmethod
    def take_spare(c: sqlite3.Connection, run_id: str) -> bool:
        """Claim one spare run inside ``c``: True for exactly one caller, whoever races."""
        return bool(c.execute("DELETE FROM spare_runs WHERE run_id=?", (run_id,)).rowcount)

    @staticmethod
    def put_spare(
        c: sqlite3.Connection, run_id: str, uri: str, experiment: str, experiment_id: str
    ) -> None:
        """Record a spare run (made, or given back by a launch that did not record its job)."""
        c.execute(
            "INSERT OR IGNORE INTO spare_runs (run_id, uri, experiment, experiment_id,"
            " created_at) VALUES (?,?,?,?,?)",
            (run_id, uri, experiment, experiment_id, time.time()),
        )

    def add_spare(self, run_id: str, uri: str, experiment: str, experiment_id: str) -> None:
        with self.tx() as c:
            self.put_spare(c, run_id, uri, experiment, experiment_id)

    def drop_spares(self, run_ids: list[str]) -> None:
        """Forget spare runs (expired, or found unusable: their run or experiment deleted)."""
        if not run_ids:
            return
        with self.tx() as c:
            c.executemany("DELETE FROM spare_runs WHERE run_id=?", [(r,) for r in run_ids])

    def all_spares(self) -> list[sqlite3.Row]:
        return self.read("SELECT run_id, uri FROM spare_runs ORDER BY created_at", ())

    def forget_spare(self, run_id: str) -> bool:
        """Take one spare out of the pool to end it: False when a launch claimed it first."""
        with self.tx() as c:
            return self.take_spare(c, run_id)

    def spares_made_before(self, before: float) -> list[sqlite3.Row]:
        return self.read("SELECT run_id, uri FROM spare_runs WHERE created_at < ?", (before,))

    def spare_count(self, uri: str, experiment: str) -> int:
        rows = self.read(
            "SELECT count(*) AS n FROM spare_runs WHERE uri=? AND experiment=?", (uri, experiment)
        )
        return int(rows[0]["n"])

    @staticmethod
    def want_spares(c: sqlite3.Connection, uri: str, experiment: str) -> None:
        """Note, inside a launch's transaction, that this pool is used: it is kept filled."""
        c.execute(
            "INSERT INTO spare_pools (uri, experiment, wanted_at) VALUES (?,?,?)"
            " ON CONFLICT(uri, experiment) DO UPDATE SET wanted_at=excluded.wanted_at",
            (uri, experiment, time.time()),
        )

    def wanted_pools(self, uri: str, since: float) -> list[str]:
        """The experiments of ``uri`` whose spares a launch asked for after ``since``."""
        rows = self.read(
            "SELECT experiment FROM spare_pools WHERE uri=? AND wanted_at >= ?", (uri, since)
        )
        return [r["experiment"] for r in rows]

    def drop_pool(self, uri: str, experiment: str) -> list[str]:
        """Forget a pool and its spares (its experiment is gone); returns the spares' run ids."""
        with self.tx() as c:
            rows = c.execute(
                "SELECT run_id FROM spare_runs WHERE uri=? AND experiment=?", (uri, experiment)
            ).fetchall()
            c.execute("DELETE FROM spare_runs WHERE uri=? AND experiment=?", (uri, experiment))
            c.execute("DELETE FROM spare_pools WHERE uri=? AND experiment=?", (uri, experiment))
        return [r["run_id"] for r in rows]

    def set_tracking_note(self, job_id: str, note: str | None) -> None:
        """Say why a job has no MLflow run (yet): shown with its message while it has none."""
        with self.tx() as c:
            c.execute("UPDATE jobs SET tracking_note=? WHERE job_id=?", (note, job_id))
