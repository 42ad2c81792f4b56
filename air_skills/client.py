"""``Client``: the one API that the CLI, the MCP server and the autoresearch loop all use."""

from __future__ import annotations

import copy
import functools
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.backends.base import Backend, backend
from air_skills.backends.info import row_to_info
from air_skills.errors import AirError, InvalidInput, InvalidSpec, InvalidState, NotFound
from air_skills.gpu.providers import provider
from air_skills.models import GpuInfo, JobInfo, JobSpec, JobStatus, LogChunk, Metrics, Page
from air_skills.polling import backoff
from air_skills.runtime.launch import duplicates
from air_skills.runtime.launch.launch_check import check_command, refuse
from air_skills.runtime.launch.orphans import sweep_orphans
from air_skills.runtime.launch.prepare import LaunchContext
from air_skills.runtime.results.log_read import BadOffset, read_log
from air_skills.runtime.results.log_search import BadPattern, LogSearch, search_log
from air_skills.runtime.scheduling import passes as local
from air_skills.runtime.store.identities import Identity
from air_skills.runtime.store.job_ids import resolve_job_id
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import Store
from air_skills.runtime.supervision.stall import say_stalled, stalls_since
from air_skills.vocabulary import Direction

RANK_POOL = 1000  # list(order_by=...) ranks the newest this many jobs
# A cancelled job is ended by its supervisor: SIGTERM, AIR_GRACE_S, then its record, written
# after the MLflow run's end (it waits up to 60 s for MLflow's import: slow on a loaded machine).
# A cancel waits that long for the end; on a quiet machine it comes in well under a second.
STOP_WAIT_S = 90.0


@functools.lru_cache(maxsize=1)
def _local_user() -> str:
    """The local user's name (``launched_by`` of a CLI or Python API launch)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid-{os.geteuid()}"


def _resolved(folder: str) -> Path:
    """``folder`` made absolute, with ``~`` and symlinks expanded."""
    return _real_path(os.path.abspath(os.path.expanduser(folder)))


@functools.lru_cache(maxsize=64)
def _real_path(absolute: str) -> Path:
    # One lstat per part of the path: cached, as one process mostly launches from one folder.
    return Path(absolute).resolve()


class Client:
    """Launch, watch, read and cancel jobs. Safe to share between threads."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        settings.check_all()  # a bad AIR_* value is refused here, not deep in a launch
        self.runtime = LaunchContext(home)
        self.home = self.runtime.home
        # Who calls: None is the local user (CLI, stdio MCP, the Python API); an air-mcp HTTP
        # caller's token gives its identity (``as_identity``), with its project and limits.
        self.identity: Identity | None = None
        _ = self.store  # open now: a corrupt or read-only AIR_HOME fails here, clearly

    def as_identity(self, identity: Identity | None) -> Client:
        """This client acting for ``identity`` (the same home, store and tracker)."""
        if identity is None:
            return self
        scoped = copy.copy(self)
        scoped.identity = identity
        return scoped

    # --- identities of air-mcp's HTTP callers (`air mcp-token`) -------------------------------

    def add_identity(
        self,
        name: str,
        project: str,
        *,
        max_gpus: int | None = None,
        priority_max: str = "high",
        admin: bool = False,
    ) -> str:
        """Make an identity for an agent; returns its token (shown once, stored hashed)."""
        from air_skills.runtime.store import identities

        with self.store.tx() as c:
            return identities.add(
                c, name, project, max_gpus=max_gpus, priority_max=priority_max, admin=admin
            )

    def identities(self) -> list[dict[str, Any]]:
        """Every identity with its limits and the GPUs its live jobs ask for (no tokens)."""
        from air_skills.runtime.store import identities

        self.reconcile()
        with self.store.tx() as c:
            return identities.listing(c)

    def revoke_identity(self, name: str) -> None:
        """Revoke an identity's token: its next request is refused."""
        from air_skills.runtime.store import identities

        with self.store.tx() as c:
            identities.revoke(c, name)

    def identity_for_token(self, token: str) -> Identity | None:
        """The active identity a bearer token belongs to (None: no identity's token)."""
        from air_skills.runtime.store import identities

        return identities.for_token(self.store.conn, token)

    def launcher(self) -> str:
        """The name a launch records as ``launched_by``: the identity's, else the local user's."""
        if self.identity is not None:
            return self.identity.name
        return _local_user()

    @staticmethod
    def rebuild(home: str | os.PathLike[str] | None = None, dry_run: bool = False) -> dict:
        """Record the job folders the state database does not know (`air doctor --rebuild`);
        another home's database is moved aside first. Opens no Client: it repairs a home
        whose database is refused. ``dry_run``: say what it would do, change nothing."""
        from air_skills.home import default_home, ensure_home
        from air_skills.runtime.store.rebuild import rebuild

        where = ensure_home(Path(home).expanduser() if home else default_home()).resolve()
        return rebuild(where, dry_run=dry_run, check=JobSpec.stored)

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def tracker(self) -> Any:
        return self.runtime.tracker

    def backend(self, name: str) -> Backend:
        """The backend registered as ``name`` (``local``, ``ray``, ...), over this home."""
        return backend(name, self.runtime)

    # --- launching ----------------------------------------------------------------------------

    def launch(
        self, spec: JobSpec | dict[str, Any], dry_run: bool = False, *, strict: bool = False
    ) -> JobInfo:
        """Queue a job and start it if GPUs are free; returns as soon as it is queued/started.

        With ``dry_run`` nothing is recorded: the returned info says what would happen, and
        whether the command would start (its executable on the job's PATH, a script argument
        in the workdir); with ``strict`` too, a command that would not start is refused
        (``invalid-spec``). A real launch refuses it too, nothing queued, unless the spec says
        ``check_command: false`` (a job that creates its script at run time).
        """
        return self._launch(spec, dry_run, strict=strict)

    def _launch(
        self,
        spec: JobSpec | dict[str, Any],
        dry_run: bool,
        snapshot: Any = None,
        strict: bool = False,
        *,
        batch: bool = False,
    ) -> JobInfo:
        spec = JobSpec.parse(spec)
        if "backend" not in spec.model_fields_set and self.store.setting("backend"):
            # AIR_HOME's default backend (python -m air_skills.backends.ray config --backend)
            spec = spec.model_copy(update={"backend": self.store.setting("backend")})
        spec = self._for_launcher(spec)
        if spec.allow_duplicate is None:  # whether Store.queue refuses the same experiment
            spec = spec.model_copy(update={"allow_duplicate": not self._dedup(batch)})
        spec = self._resolve(spec)
        spec = self._check_data(spec)  # refused data inputs: nothing is created
        problems = check_command(spec, snapshot) if dry_run or spec.check_command else []
        if problems and (strict or not dry_run):  # `pyhton`, `trian.py`: refused, none queued
            raise refuse(problems, dry_run)
        try:
            info = self.backend(spec.backend).launch(spec, dry_run=dry_run)
        except AirError as exc:
            if exc.code == "duplicate":  # its result, for the caller to read instead
                duplicates.explain(exc, self.store, self.tracker)
            raise
        if problems:
            info.message += "; WOULD NOT START: " + "; ".join(problems)
        digest = info.code.digest if info.code else None
        twice = duplicates.dry_run_note(self.store, spec, digest) if dry_run else None
        info.message += f"; {twice}" if twice else ""
        near = (
            None
            if dry_run
            else duplicates.near_note(
                self.store, info.job_id, float(settings.get("AIR_DEDUP_NEAR"))
            )
        )
        if near:
            info.message += "; " + near
        if info.code is not None and not dry_run:
            from air_skills.runtime.code.code_gc import maybe_collect

            maybe_collect(self.home)  # old snapshots go, at most once a day (one stat else)
        return info

    def _dedup(self, batch: bool) -> bool:
        """Whether a launch is refused as a duplicate of a queued, running or done job
        (AIR_DEDUP: ``identities``, the default, checks air-mcp tokens' launches and batches
        (launch_jobs, suggest_trials); ``always`` every launch; ``off`` none)."""
        mode = settings.get("AIR_DEDUP")
        if mode == "off":
            return False
        return mode == "always" or batch or self.identity is not None

    def _for_launcher(self, spec: JobSpec) -> JobSpec:
        """Record who launches; an identity launches in its own project, within its priority
        (its GPU limit is checked where the job is queued, in the same transaction)."""
        update: dict[str, Any] = {"launched_by": self.launcher()}
        who = self.identity
        if who is not None:
            from air_skills.runtime.store.identities import check_launch

            if spec.project is None:
                update["project"] = who.project
            with self.store.tx() as c:  # a clear refusal before anything is built
                check_launch(
                    c,
                    {**spec.model_dump(mode="json"), "gpus": 0},
                    who.name,
                    spec.project or who.project,
                )
        return spec.model_copy(update=update)

    def rerun(
        self,
        job_id: str,
        config: dict[str, Any] | None = None,
        patch: str | None = None,
        dry_run: bool = False,
        *,
        strict: bool = False,
    ) -> JobInfo:
        """Launch ``job_id``'s stored snapshot (not the tree as it is now) and config again:
        ``config`` keys over its config, ``patch`` instead of its patch, on the same base.
        ``dry_run`` and ``strict`` as for ``launch``."""
        from air_skills.runtime.code.code_source import load_job_code, rerun_snapshot, rerun_spec
        from air_skills.runtime.code.job_code import pinned_snapshot

        job_id = self.resolve_id(job_id)
        row = self._row(job_id)
        snapshot = rerun_snapshot(load_job_code(self.home, job_id, row.code))
        spec = rerun_spec(self.home, job_id, row.spec_dict(), config, patch)
        spec["allow_duplicate"] = True  # an explicit rerun is never a duplicate
        with pinned_snapshot(snapshot):
            return self._launch(spec, dry_run, snapshot, strict=strict)

    def launch_many(
        self,
        specs: list[dict[str, Any]],
        dry_run: bool = False,
        idempotency_key: str | None = None,
    ) -> list[JobInfo]:
        """Launch many jobs as one: every item validated and dry-run checked (executable,
        script, data, patch) before any is queued; one refused item refuses them all, each
        problem named. Item n without its own key gets ``idempotency_key#n``. An item whose
        experiment is queued, running or done (AIR_DEDUP) is not queued: its place holds that
        job, its message saying DUPLICATE."""
        from air_skills.batch import launch_all

        return launch_all(
            specs,
            check=lambda spec: self._launch(spec, True, strict=True),
            launch=None if dry_run else self._launch_or_duplicate,
            idempotency_key=idempotency_key,
        )

    def _launch_or_duplicate(self, spec: JobSpec | dict[str, Any]) -> JobInfo:
        """Launch (a batch's item): a duplicate gives the job that already runs it."""
        try:
            return self._launch(spec, False, batch=True)
        except AirError as exc:
            if exc.code != "duplicate":
                raise
            info = self.get(str(exc.context["job_id"]))
            return info.model_copy(update={"message": f"DUPLICATE, not queued: {exc.message}"})

    def seed_groups(
        self,
        job_ids: list[str],
        metric: str,
        direction: Direction = "minimize",
        seed_key: str = "seed",
    ) -> list[dict[str, Any]]:
        """The jobs grouped by all but their seed (spec, code, config but ``seed_key``): n,
        mean and std of the metric's final value over SUCCEEDED members; best mean first."""
        from air_skills.batch import seed_groups_of

        self.reconcile()
        rows = [self._row(j) for j in dict.fromkeys(job_ids)]
        scores = self.scores([r.job_id for r in rows], metric, direction)
        return seed_groups_of(rows, scores, seed_key, direction)

    def launch_on(self, job_id: str, spec: JobSpec | dict[str, Any]) -> JobInfo:
        """Launch ``spec`` on ``job_id``'s stored code: its snapshot, and its patch unless the
        spec brings one (a study's ``base_job``: trials run the code that job ran)."""
        from air_skills.runtime.code.code_source import load_job_code, rerun_snapshot
        from air_skills.runtime.code.job_code import pinned_snapshot

        row = self._row(job_id)
        snapshot = rerun_snapshot(load_job_code(self.home, row.job_id, row.code))
        spec = JobSpec.parse(spec)
        if spec.patch is None and row.spec_dict().get("patch"):
            spec = spec.model_copy(update={"patch": row.spec_dict()["patch"]})
        with pinned_snapshot(snapshot):
            return self._launch(spec, False, snapshot)

    @property
    def code(self) -> Any:
        """Code-snapshot verbs: ``diff(a, b)``, ``patch(job)``, ``export(...)``, ``gc()``."""
        from air_skills.runtime.code.code_ops import CodeOps
        from air_skills.runtime.runs.spare_runs import sweep

        return CodeOps(self.home, self._row, lambda dry_run: sweep(self.store, dry_run))

    def _resolve(self, spec: JobSpec) -> JobSpec:
        workdir = _resolved(spec.workdir or os.getcwd())
        if not workdir.is_dir():
            raise InvalidSpec(
                f"workdir {workdir} does not exist",
                hint="give an existing folder as workdir (default: the current one)",
            )
        updates: dict[str, Any] = {"workdir": str(workdir)}
        if spec.project is None:
            updates["project"] = spec.resolved_project()
        return spec.model_copy(update=updates)

    def _check_data(self, spec: JobSpec) -> JobSpec:
        """Resolve data inputs under AIR_DATA_ROOTS and fingerprint them (real paths, digests)."""
        if not spec.data:
            return spec
        from air_skills.models import DataInput
        from air_skills.tracking.data import prepare_inputs

        data = [DataInput(**d) for d in prepare_inputs(spec.data, self.home, spec.workdir)]
        return spec.model_copy(update={"data": data})

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
    ) -> Page[JobInfo]:
        """Jobs newest first, a page at a time; with ``order_by`` ("best" or "latest") and
        ``metric``, the best ``limit`` of the newest 1000 by that value (one page, best first;
        jobs without the metric last). ``scores`` gives the values."""
        if order_by is not None:
            from air_skills.tracking.compare import check_order, rank

            check_order(order_by, metric)
            pool = self.list(
                status, experiment, RANK_POOL, None, project, launched_by=launched_by
            ).items
            scores = self.scores([i.job_id for i in pool], str(metric), direction)
            ranked = rank(pool, scores, order_by, direction)[:limit]
            return Page[JobInfo](items=ranked, next_cursor=None)
        self.reconcile()
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
        rows = self.store.page_rows(
            status=value,
            experiment=experiment,
            project=project,
            before_seq=int(cursor) if cursor else None,
            limit=limit + 1,
            launched_by=launched_by,
        )
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

    def scores(
        self,
        job_ids: list[str],
        metric: str,
        direction: Direction = "minimize",
        at_step: int | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Per job: the metric's latest value and step, best and its step (and at a step)."""
        from air_skills.tracking.compare import metric_scores

        found = metric_scores(
            [self._row(j) for j in job_ids], self.tracker, metric, direction, at_step
        )
        return {job_id: score for job_id, score in found.items() if score}

    def search_log(
        self, job_id: str, pattern: str, last_match: bool = False, max_matches: int = 20
    ) -> LogSearch:
        """Lines of the job's log that match a regular expression (line numbers, byte offsets)."""
        row = self._row(job_id)
        self.backend(row.backend).logs(row)  # Ray holds the output: bring the file up to date
        try:
            return search_log(row.log_path, pattern, last_match, max_matches)
        except BadPattern as exc:
            raise InvalidInput(
                str(exc),
                code="invalid-pattern",
                hint="give an RE2 regular expression (no look-arounds or back-references),"
                " e.g. 'loss=[0-9.]+' or '(?i)error'",
            ) from None

    def logs(self, job_id: str, tail: int | None = 100, offset: int | None = None) -> LogChunk:
        """The last ``tail`` lines, or (with ``offset``) the bytes from that offset on."""
        job_id = self.resolve_id(job_id)
        row = self._row(job_id)
        self.backend(row.backend).logs(row)  # Ray holds the output: bring the file up to date
        try:
            part = read_log(row.log_path, tail, offset)
        except BadOffset as exc:
            raise InvalidInput(str(exc), hint="pass next_offset as given") from None
        return LogChunk(job_id=job_id, **vars(part))

    def metrics(
        self,
        job_id: str,
        keys: list[str] | None = None,
        history: bool = False,
        max_points: int = 200,
    ) -> Metrics:
        job_id = self.resolve_id(job_id)
        row = self._row(job_id)
        run_id = row.run_id
        if not run_id:
            raise NotFound(
                f"job {job_id} has no MLflow run (launched with track=false, or tracking was"
                " unavailable)",
                hint="read its summary with `air logs`",
                job_id=job_id,
            )
        latest = self.tracker.latest(run_id)
        if keys:
            from air_skills.tracking.mlflow import require_metrics

            require_metrics(keys, latest, f"job {job_id}", job_id=job_id)
        hist = {}
        if history:
            hist = self.tracker.history(run_id, keys or sorted(latest), max_points, latest)
        return Metrics(job_id=job_id, run_id=run_id, latest=latest, history=hist)

    def compare(
        self,
        job_ids: list[str],
        metric: str | None = None,
        at_step: int | None = None,
        direction: Direction = "minimize",
    ) -> list[dict[str, Any]]:
        """A compact table: job, status, config diff against the first job, latest, best, step
        (and with ``at_step`` the value at that step or just before it)."""
        from air_skills.tracking.compare import compare_jobs

        self.reconcile()  # statuses as get() reports them
        rows = [self._row(j) for j in job_ids]
        return compare_jobs(rows, self.tracker, metric, direction, at_step)

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
            stalls = stalls_since(self.store, ids, since) if any else {}
            if stalls:
                infos = [
                    i.model_copy(update={"message": say_stalled(i.message, stalls.get(i.job_id))})
                    for i in infos
                ]
                break
        return infos  # ended, stalled, or the timeout passed

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
        return self.backend(row.backend).cancel(row, reason, _stop_wait_s(wait_s))

    def _may_stop(self, row: JobRecord) -> None:
        """An identity cancels its own jobs only (an admin token, any)."""
        who = self.identity
        if who is None or who.admin or row.launched_by == who.name:
            return
        from air_skills.runtime.store.identities import Forbidden

        raise Forbidden(
            f"job {row.job_id} was launched by {row.launched_by or 'the local user'!s}, not"
            f" {who.name!r}: an identity cancels only its own jobs",
            hint="ask its launcher, or use an admin token",
            job_id=row.job_id,
        )

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

    def gpus(self) -> list[GpuInfo]:
        """This machine's GPUs: health, cordon and why, the jobs on each."""
        from air_skills.gpu.inventory import gpu_table

        self.reconcile()
        return gpu_table(self.store.gpu_rows(), self.store.running_rows("local"))

    def capacity(self) -> dict[str, dict[str, int]]:
        """This machine's CPU slots and GPUs: how many, in use, and jobs queued for each."""
        self.reconcile()
        live = self.store.live_rows("local")
        running = [r for r in live if r.status == JobStatus.RUNNING.value]
        queued = [r for r in live if r.status == JobStatus.QUEUED.value]
        wants_gpu = [bool(r.spec_dict().get("gpus")) for r in queued]
        return {
            "cpu_slots": {
                "total": local.cpu_slots(),
                "used": sum(1 for r in running if not r.gpu_list()),
                "queued": wants_gpu.count(False),
            },
            "gpus": {
                "total": len(local.gpu_indices()),
                "schedulable": len(local.schedulable_gpus(self.store)),
                "used": len({g for r in running for g in r.gpu_list()}),
                "queued": wants_gpu.count(True),
            },
        }

    def holders(self) -> dict[str, str]:
        """Each running job as `job-id (project)`, or `(project, borrowing)` beyond its quota."""
        return {
            r.job_id: f"{r.job_id} ({r.project}" + (", borrowing)" if r.borrowing else ")")
            for r in self.store.running_rows()
        }

    def _check_gpu_index(self, index: int) -> None:
        indices = [d.index for d in provider().devices()]
        if index not in indices:
            raise NotFound(
                f"no GPU {index} on this machine ({provider().note})",
                hint="list GPUs with `air gpus`",
                valid_keys=indices,
            )

    def cordon(self, index: int, reason: str) -> GpuInfo:
        self._check_gpu_index(index)
        if not reason or not reason.strip():
            raise InvalidInput("a cordon needs a reason", hint="pass --reason 'why'")
        self.store.cordon(index, reason.strip())
        return next(g for g in self.gpus() if g.index == index)

    def uncordon(self, index: int, force: bool = False) -> GpuInfo:
        """Bring a GPU back after a passing preflight (``force`` skips it, and is recorded)."""
        self._check_gpu_index(index)
        faults = [f for f in provider().faults([index]) if f.critical and f.index == index]
        if faults and not force:
            raise InvalidState(
                f"GPU {index} still fails its check: "
                + "; ".join(f"{f.kind}: {f.detail}" for f in faults),
                hint="fix the GPU (or reset it), then retry; --force overrides",
                gpu=index,
            )
        failing = "; ".join(f"{f.kind}: {f.detail}" for f in faults)
        self.store.uncordon(
            index, f"(forced past a failing check: {failing})" if faults else "(check passed)"
        )
        local.schedule_pass(self.store)
        return next(g for g in self.gpus() if g.index == index)

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """The job's history: queued, started, requeued (with why), finished."""
        self._row(job_id)
        # A requeue keeps its failure kind here, even after a later attempt succeeds.
        kinds = {"requeued-infra": "infra", "requeued-user": "user"}
        return [
            {
                "ts": r["ts"],
                "kind": r["kind"],
                "message": r["message"],
                "failure_kind": kinds.get(r["kind"]),
            }
            for r in self.store.events(job_id)
        ]


def _stop_wait_s(wait_s: float | None) -> float:
    """How long a cancel waits for the job's end: ``wait_s``, else grace + STOP_WAIT_S."""
    return float(settings.get("AIR_GRACE_S")) + STOP_WAIT_S if wait_s is None else wait_s
