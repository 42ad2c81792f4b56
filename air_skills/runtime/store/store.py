"""The state store: SQLite in WAL mode under AIR_HOME, shared by every process.

Every state change is one ``BEGIN IMMEDIATE`` transaction through a named function
(``queue``, ``mark_running``, ``finish``, ``requeue``, ...). Terminal states are guarded by
a conditional update: a write that would leave one changes nothing and reports False. The
connection and its transactions are runtime/store/db.py's; the tables are runtime/store/schema.py's;
GPU cordons, quotas, settings and idle supervisors are runtime/store/pool_store.py's; spare
MLflow runs are runtime/store/spare_store.py's; the named reads of jobs are
runtime/store/job_reads.py's.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from air_skills.home import JOB_ENV, LAUNCH_ENV, job_dir, write_folder_record, write_job_env
from air_skills.runtime.results.outcomes import Outcome
from air_skills.runtime.store import dedup, identities
from air_skills.runtime.store.estimates import job_class
from air_skills.runtime.store.idempotency import check_same_spec
from air_skills.runtime.store.job_reads import JobReads
from air_skills.runtime.store.spare_store import SpareStore
from air_skills.status import PRIORITY_RANK, JobStatus

TERMINAL = tuple(s.value for s in JobStatus if s.is_terminal())
_TERMINAL_SQL = "(" + ",".join(f"'{s}'" for s in TERMINAL) + ")"


def new_job_id() -> str:
    # os.urandom, as secrets.token_hex does; importing secrets would cost every process 5 ms.
    return "job-" + os.urandom(5).hex()


class Store(SpareStore, JobReads):
    """One connection to AIR_HOME's database; cheap to create, one per process or thread."""

    # --- jobs: creation ----------------------------------------------------------------

    def queue(
        self,
        spec: Mapping[str, Any],
        job_id: str,
        log_path: str,
        name: str,
        run_id: str | None = None,
        experiment_id: str | None = None,
        message: str = "QUEUED: waiting for a scheduling pass",
        tracking_note: str | None = None,
        c: sqlite3.Connection | None = None,
        *,
        project: str,
        jdir: Path | None = None,
        code_digest: str | None = None,
    ) -> tuple[str, bool]:
        """Record a new QUEUED job; a used idempotency key gives its job (another spec: conflict).

        ``spec``: the validated JobSpec as JSON data (``spec.model_dump(mode="json")``);
        ``project``: its resolved project; ``jdir``: the job's folder as it is now (a launch
        builds it under a temporary name, renamed before the commit). Returns (job_id, created).
        ``code_digest``: its snapshot's; with it the job's run key is stored, and a spec with
        ``allow_duplicate: false`` is refused (``duplicate``) when that experiment is queued,
        running or done (runtime/store/dedup.py).
        """
        now = time.time()
        key = spec.get("idempotency_key")
        folder = jdir or job_dir(self.home, job_id)
        spec = self._keep_env_names(spec, folder)
        with self._maybe_tx(c) as c:
            if key:
                row = c.execute(
                    "SELECT job_id, name, spec FROM jobs WHERE idempotency_key = ?", (key,)
                ).fetchone()
                if row:  # another launcher won the race: the same spec or a conflict
                    check_same_spec(key, row[0], row[1], json.loads(row[2]), spec)
                    return row[0], False
            # An identity's limits hold in this transaction: racing launches cannot both pass.
            identities.check_launch(c, spec, spec.get("launched_by"), project)
            run_key, near_key = dedup.keys(spec, code_digest)
            if spec.get("allow_duplicate") is False:  # the launch asked for the check
                dedup.refuse_duplicate(c, run_key)
            c.execute(
                "INSERT INTO jobs (job_id, name, spec, status, priority, preemptible,"
                " gpus_requested, created_at, queued_at, log_path, backend, project,"
                " idempotency_key, message, run_id, experiment_id, tracking_note, job_class,"
                " launched_by, run_key, near_key)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    name,
                    # Compact, as pydantic writes it: the spec is read back by json_extract.
                    json.dumps(spec, separators=(",", ":"), ensure_ascii=False),
                    JobStatus.QUEUED.value,
                    PRIORITY_RANK[spec.get("priority", "normal")],
                    int(bool(spec.get("preemptible"))),
                    spec.get("gpus", 0),
                    now,
                    now,
                    log_path,
                    spec.get("backend", "local"),
                    project,
                    key,
                    message,
                    run_id,
                    experiment_id,
                    tracking_note,
                    job_class(spec),  # learned run-time estimates (runtime/store/estimates.py)
                    spec.get("launched_by"),
                    run_key,
                    near_key,
                ),
            )
            self._event(c, job_id, "queued", "job queued")
        write_folder_record(
            folder,
            {
                "spec": spec,
                "name": name,
                "project": project,
                "run_id": run_id,
                "experiment_id": experiment_id,
                "log_path": log_path,
                "created_at": now,
            },
        )
        return job_id, True

    def _keep_env_names(self, spec: Mapping[str, Any], jdir: Path) -> Mapping[str, Any]:
        """The spec to store: its ``env`` values (API keys) go to the job's folder, owner-only,
        and are deleted when it ends; the record keeps only the names.
        """
        env = spec.get("env")
        if not env or not any(env.values()):
            return spec
        if not jdir.is_dir():
            return spec
        write_job_env(jdir, dict(env))
        return {**spec, "env": dict.fromkeys(env, "")}

    # --- named state changes ------------------------------------------------------------

    def mark_running(
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

    def set_code(self, c: sqlite3.Connection, job_id: str, code: Mapping[str, Any]) -> None:
        """Record a job's code info (JSON; see runtime.job_code) in ``c``'s transaction."""
        c.execute("UPDATE jobs SET code = ? WHERE job_id = ?", (json.dumps(code), job_id))

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
                jdir = job_dir(self.home, job_id)
                (jdir / LAUNCH_ENV).unlink(missing_ok=True)
                (jdir / JOB_ENV).unlink(missing_ok=True)
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

    def record_outcome(
        self, job_id: str, outcome: Outcome, c: sqlite3.Connection | None = None
    ) -> bool:
        """Record an attempt's end as runtime/results/outcomes.py classified it (finish or
        requeue)."""
        if outcome.action == "requeue":
            assert outcome.kind is not None
            return self.requeue(
                job_id,
                message=outcome.message,
                kind=outcome.kind,
                c=c,
                exit_code=outcome.exit_code,
                signal=outcome.signal,
            )
        assert outcome.status is not None
        return self.finish(
            job_id,
            outcome.status,
            message=outcome.message,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            failure_kind=outcome.failure_kind,
            c=c,
        )

    def append_message(self, job_id: str, note: str) -> None:
        """Add a note to the job's message, whatever its status (e.g. after its end)."""
        with self.tx() as c:
            c.execute("UPDATE jobs SET message = message || ? WHERE job_id=?", (note, job_id))

    def event(self, job_id: str | None, kind: str, message: str) -> None:
        with self.tx() as c:
            self._event(c, job_id, kind, message)

    # --- named writes for quotas ------------------------------------------------------------

    def remove_quota(self, project: str) -> None:
        with self.tx() as c:
            c.execute("DELETE FROM quotas WHERE project=?", (project,))
