"""``Client``: the one API that the CLI, the MCP server and the autoresearch loop all use."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from air_skills import settings
from air_skills.backends.base import Backend, backend
from air_skills.backends.info import row_to_info
from air_skills.client.batches import BatchMixin
from air_skills.client.identities import IdentityMixin
from air_skills.client.launching import LaunchMixin
from air_skills.client.pool import PoolMixin
from air_skills.client.results import ResultsMixin
from air_skills.errors import InvalidInput, InvalidState, NotFound
from air_skills.polling import backoff
from air_skills.runtime.launch.orphans import sweep_orphans
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.store.identities import Identity
from air_skills.runtime.store.job_ids import resolve_job_id
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store
from air_skills.runtime.supervision.stall_words import say_stalled, stalls_since
from air_skills.status import JobStatus
from air_skills.vocabulary import Direction

if TYPE_CHECKING:  # pydantic's models: imported where one is made (a launch from a shell
    # checks its spec without them: launch_view)
    from air_skills.models import JobInfo, Page

# A cancelled job is ended by its supervisor: SIGTERM, AIR_GRACE_S, then its record, written
# after the MLflow run's end (it waits up to 60 s for MLflow's import: slow on a loaded machine).
# A cancel waits that long for the end; on a quiet machine it comes in well under a second.
STOP_WAIT_S = 90.0


class Client(LaunchMixin, IdentityMixin, BatchMixin, ResultsMixin, PoolMixin):
    """Launch, watch, read and cancel jobs. Safe to share between threads."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        settings.check_all()  # a bad AIR_* value is refused here, not deep in a launch
        self.runtime = LaunchContext(home)
        self.home = self.runtime.home
        # Who calls: None is the local user (CLI, stdio MCP, the Python API); an air-mcp HTTP
        # caller's token gives its identity (``as_identity``), with its project and limits.
        self.identity: Identity | None = None
        _ = self.store  # open now: a corrupt or read-only AIR_HOME fails here, clearly

    # --- identities of air-mcp's HTTP callers (`air mcp-token`) -------------------------------

    @staticmethod
    def rebuild(home: str | os.PathLike[str] | None = None, dry_run: bool = False) -> dict:
        """Record the job folders the state database does not know (`air doctor --rebuild`);
        another home's database is moved aside first. Opens no Client: it repairs a home
        whose database is refused. ``dry_run``: say what it would do, change nothing."""
        from air_skills.home import default_home, ensure_home
        from air_skills.models import JobSpec
        from air_skills.runtime.store.rebuild import rebuild

        where = ensure_home(Path(home).expanduser() if home else default_home()).resolve()
        result = rebuild(where, dry_run=dry_run, check=JobSpec.stored)
        if not (dry_run and result["other_home_db"]):  # that database is not this home's
            result["results_index"] = Client._rebuild_results(where, dry_run)
        return result

    @staticmethod
    def _rebuild_results(home: Path, dry_run: bool) -> dict[str, int]:
        """The results index rebuilt from MLflow, the record: every tracked job read again
        (``jobs``: how many; ``indexed``: how many were written; the rest stay due)."""
        from air_skills.runtime.runs.run_index import catch_up
        from air_skills.runtime.store import results_index

        store = Store(home, rebuilding=True)
        try:
            if dry_run:
                n = store.read("SELECT COUNT(*) FROM jobs WHERE run_id IS NOT NULL")[0][0]
                return {"jobs": int(n), "indexed": 0}
            n = results_index.forget_all(store)
            return {"jobs": n, "indexed": catch_up(store)}
        finally:
            store.close()

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def tracker(self) -> Any:
        return self.runtime.tracker

    def backend(self, name: str) -> Backend:
        """The backend registered as ``name`` (``local``, ``ray``, ...), over this home."""
        return backend(name, self.runtime)

    @property
    def code(self) -> Any:
        """Code-snapshot verbs: ``diff(a, b)``, ``patch(job)``, ``export(...)``, ``gc()``."""
        from air_skills.runtime.code.code_ops import CodeOps
        from air_skills.runtime.runs.spare_runs import sweep

        return CodeOps(self.home, self._row, lambda dry_run: sweep(self.store, dry_run))

    def gc(
        self,
        dry_run: bool = False,
        older_than_days: float | None = None,
        keep_last: int | None = None,
    ) -> dict[str, Any]:
        """``air gc``: finished jobs no retention rule keeps (``older_than_days``/``keep_last``,
        default AIR_GC_KEEP_DAYS/AIR_GC_KEEP_JOBS; runtime/runs/retention.py) under ``jobs``,
        then code snapshots and spare runs (``code.gc``)."""
        from air_skills.runtime.runs.retention import collect, policy

        days, count = policy()
        days = days if older_than_days is None else older_than_days
        count = count if keep_last is None else keep_last
        jobs = collect(self.home, days, count, dry_run=dry_run)
        report = self.code.gc(dry_run=dry_run)
        report["jobs"] = jobs
        return report

    # --- reading ------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """Settle records whose supervisor (or Ray job) is gone; start what can start; clean
        up after crashed launches (at most once a minute, see runtime/launch/orphans.py)."""
        sweep_orphans(self.runtime)
        for name in self.store.live_backends():
            self.backend(name).reconcile()

    def _row(self, job_id: str) -> JobRecord:
        row = self.store.row(self.resolve_id(job_id))
        if row is None:
            raise NotFound(
                f"no job {job_id!r}",
                hint="list jobs with `air ls` (MCP: list_jobs)",
                job_id=job_id,
            )
        return row

    def resolve_id(self, job_id: str) -> str:
        """The job id ``job_id`` names: itself, or the one job whose id starts with it
        (``job-1de7`` or ``1de7``, as git takes a commit's prefix); an ambiguous prefix is
        refused, listing the matches (runtime/store/job_ids.py)."""
        return resolve_job_id(self.store, job_id)

    def get(self, job_id: str) -> JobInfo:
        job_id = self.resolve_id(job_id)
        self.reconcile()
        return row_to_info(self._row(job_id))

    def list(
        self,
        status: str | JobStatus | None = None,
        experiment: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        project: str | None = None,
        metric: str | None = None,
        order_by: str | None = None,
        direction: Direction = "minimize",
        launched_by: str | None = None,
        *,
        config: dict[str, Any] | None = None,
        study: str | None = None,
    ) -> Page[JobInfo]:
        """Jobs newest first, a page at a time; with ``order_by`` ("best" or "latest") and
        ``metric``, a leaderboard: every matching job ranked by that value from the results
        index (runtime/store/results_index.py), best first, then the jobs without a finite
        value for it, newest first; paged by ``cursor``. ``config`` ({key: value}) and
        ``study`` (a study's name) filter it too. ``scores`` gives the values."""
        if order_by is not None:
            return self._leaderboard(
                str(metric or ""),
                order_by,
                direction,
                status=status,
                experiment=experiment,
                project=project,
                launched_by=launched_by,
                config=config,
                study=study,
                limit=limit,
                cursor=cursor,
            )
        if config or study:
            raise InvalidInput(
                "config and study filters rank jobs by a metric",
                hint="pass metric='val_loss' and order_by='best' with them",
            )
        self.reconcile()
        value = self._check_page(status, project, cursor, limit)
        rows = self.store.page_rows(
            status=value,
            experiment=experiment,
            project=project,
            before_seq=int(cursor) if cursor else None,
            limit=limit + 1,
            launched_by=launched_by,
        )
        from air_skills.models import JobInfo, Page

        more = len(rows) > limit
        rows = rows[:limit]
        total = self.store.page_count(
            status=value, experiment=experiment, project=project, launched_by=launched_by
        )  # "8 of 53": the page says how much it is of
        return Page[JobInfo](
            items=[row_to_info(r) for r in rows],
            next_cursor=str(rows[-1].seq) if more else None,
            total=total,
        )

    def _check_page(
        self, status: str | JobStatus | None, project: str | None, cursor: str | None, limit: int
    ) -> str | None:
        """The status's stored value, once the page's arguments are checked."""
        value = None
        if status is not None:
            try:
                value = JobStatus(str(status).upper()).value
            except ValueError:
                raise InvalidInput(
                    f"unknown status {status!r}",
                    hint="use one of " + ", ".join(s.value for s in JobStatus),
                    valid_keys=[s.value for s in JobStatus],
                ) from None
        if project is not None:
            from air_skills.quotas import check_project

            check_project(self.store, project)  # a typo lists the known projects, not an empty page
        if cursor and not re.fullmatch(r"[0-9]{1,18}", cursor):  # "²".isdigit() is True
            raise InvalidInput(f"bad cursor {cursor!r}", hint="pass next_cursor as given")
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit {limit} out of range", hint="use 1 to 1000")
        return value

    def _leaderboard(
        self,
        metric: str,
        order_by: str,
        direction: Direction,
        *,
        status: str | JobStatus | None,
        experiment: str | None,
        project: str | None,
        launched_by: str | None,
        config: dict[str, Any] | None,
        study: str | None,
        limit: int,
        cursor: str | None,
    ) -> Page[JobInfo]:
        """Every matching job ranked by ``metric`` (results_index.leaderboard); the cursor
        is the rank the next page starts at."""
        from air_skills.runtime.runs.run_index import catch_up
        from air_skills.runtime.store import results_index
        from air_skills.tracking.compare import check_order

        check_order(order_by, metric)
        self.reconcile()
        value = self._check_page(status, project, cursor, limit)
        catch_up(self.store)  # running jobs' metrics so far, ends a kill cut short
        where = results_index.Where(
            status=value,
            experiment=experiment,
            project=project,
            launched_by=launched_by,
            config=dict(config or {}),
            study=study,
        )
        from air_skills.models import JobInfo, Page

        board = results_index.leaderboard(
            self.store, metric, order_by, direction, where, limit, int(cursor or 0)
        )
        return Page[JobInfo](
            items=[row_to_info(r) for r, _ in board.rows],
            next_cursor=None if board.next_offset is None else str(board.next_offset),
            total=board.total,
        )

    def wait(
        self,
        job_ids: Iterable[str],
        timeout_s: float | None = None,
        any: bool = True,
        on_progress: Callable[[list[JobInfo]], None] | None = None,
    ) -> list[JobInfo]:
        """Wait until any (or all) of the jobs end, or the timeout; returns their infos.
        With ``any``, a job that stalls (runtime/supervision/stall.py) ends the wait too, and
        its message says so."""
        ids = list(dict.fromkeys(job_ids))
        since = time.time()
        if not ids:
            raise InvalidInput("no job ids to wait for", hint="pass one or more job ids")
        ids = list(dict.fromkeys(self.resolve_id(j) for j in ids))
        for job_id in ids:
            self._row(job_id)
        infos: list[JobInfo] = []
        for _ in backoff(timeout_s=timeout_s):
            self.reconcile()
            infos = [row_to_info(self._row(j)) for j in ids]
            if on_progress:
                on_progress(infos)
            done = [i.status.is_terminal() for i in infos]
            if (any and True in done) or all(done):
                break
            infos, stalled = self.stalls(infos, since) if any else (infos, [])
            if stalled:
                break
        return infos  # ended, stalled, or the timeout passed

    def stalls(self, infos: list[JobInfo], since: float) -> tuple[list[JobInfo], list[str]]:
        """``infos``, each job that stalled after ``since`` (epoch s) told so in its message,
        and the ids of those jobs (none: ``infos`` as they were)."""
        found = stalls_since(self.store, [i.job_id for i in infos], since)
        if not found:
            return infos, []
        told = [
            i.model_copy(update={"message": say_stalled(i.message, found.get(i.job_id))})
            for i in infos
        ]
        return told, list(found)

    # --- cancelling ----------------------------------------------------------------------------

    def cancel(
        self, job_id: str, reason: str | None = None, wait_s: float | None = None
    ) -> JobInfo:
        """Cancel a queued or running job (SIGTERM, then SIGKILL after the grace period);
        waits up to ``wait_s`` (default: the grace period and the supervisor's end) for its
        end."""
        row = self._row(job_id)
        self._may_stop(row)
        reason = reason or "cancelled by request"
        wait = _stop_wait_s(wait_s)
        started = time.monotonic()
        info = self.backend(row.backend).cancel(row, reason, wait)
        if info.status == JobStatus.CANCELLED and row.status == "RUNNING" and row.run_id:
            from air_skills.runtime.runs.run_end import wait_run_end

            # Its supervisor records the end first and its run's end follows (run_end.py).
            wait_run_end(self.store, job_id, wait - (time.monotonic() - started))
        return info

    def cancel_all(self, reason: str | None = None) -> list[JobInfo]:
        rows = self.store.live_rows()
        out = []
        for row in rows:
            try:
                out.append(self.cancel(row.job_id, reason, wait_s=0))
            except InvalidState:
                out.append(self.get(row.job_id))
        ids = [i.job_id for i in out if not i.status.is_terminal()]
        if ids:
            out = self.wait(ids, timeout_s=_stop_wait_s(None), any=False) + [
                i for i in out if i.status.is_terminal()
            ]
        return out

    # --- GPUs ------------------------------------------------------------------------------------


def _stop_wait_s(wait_s: float | None) -> float:
    """How long a cancel waits for the job's end: ``wait_s``, else grace + STOP_WAIT_S."""
    return float(settings.get("AIR_GRACE_S")) + STOP_WAIT_S if wait_s is None else wait_s
