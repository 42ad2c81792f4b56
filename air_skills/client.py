"""``Client``: the one API that the CLI, the MCP server and the autoresearch loop all use."""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from air_skills.errors import (
    InsufficientGpus,
    InvalidInput,
    InvalidSpec,
    InvalidState,
    NotFound,
    TrackingUnavailable,
)
from air_skills.gpu.providers import provider
from air_skills.home import check_job_id, default_home, ensure_home, write_launch_env
from air_skills.models import GpuInfo, JobInfo, JobSpec, JobStatus, LogChunk, Metrics, Page
from air_skills.runtime import passes as local
from air_skills.runtime.store import Store, new_job_id, row_to_info

MAX_LOG_BYTES = 256 * 1024


@dataclass
class PreparedJob:
    """A job's folder and MLflow run, made before the job is recorded in the store."""

    job_id: str
    jdir: Path
    log_path: Path
    name: str
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_note: str | None = None


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
        self.home = ensure_home(Path(home).expanduser() if home else default_home()).resolve()
        self._local = threading.local()
        self._tracker: Any = None
        _ = self.store  # open now: a corrupt or read-only AIR_HOME fails here, clearly

    @property
    def store(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.home)
        return store

    @property
    def tracker(self) -> Any:
        if self._tracker is None:
            from air_skills.tracking.mlflow import MlflowTracker

            self._tracker = MlflowTracker(self.home)
        return self._tracker

    # --- launching ----------------------------------------------------------------------------

    def launch(self, spec: JobSpec | dict[str, Any], dry_run: bool = False) -> JobInfo:
        """Queue a job and start it if GPUs are free; returns as soon as it is queued/started.

        With ``dry_run`` nothing is recorded: the returned info says what would happen.
        """
        spec = JobSpec.parse(spec)
        if "backend" not in spec.model_fields_set and self.store.setting("backend"):
            # AIR_HOME's default backend (python -m air_skills.backends.ray config --backend)
            spec = spec.model_copy(update={"backend": self.store.setting("backend")})
        spec = self._resolve(spec)
        spec = self._check_data(spec)  # refused data inputs: nothing is created
        if spec.backend == "ray":
            from air_skills.backends.ray import RayBackend

            return RayBackend(self).launch(spec, dry_run=dry_run)
        self._check_gpus(spec)
        if dry_run:
            return self._dry_run_info(spec)
        existing = self.existing(spec)
        if existing is not None:
            return existing
        job = self.prepare(spec)
        job_id, jdir, run_id = job.job_id, job.jdir, job.run_id
        write_launch_env(jdir)  # whichever process starts the job, it gets this environment
        gpus = local.schedulable_gpus(self.store)
        with self.store.tx() as c:  # queued and scheduled at once: one transaction
            got, created = self.store.queue(
                spec,
                job_id,
                str(job.log_path),
                job.name,
                run_id,
                job.experiment_id,
                tracking_note=job.tracking_note,
                c=c,
            )
            decided = local.pass_in_tx(self.store, c, gpus, new_job=job_id) if created else None
        if decided is None:  # a concurrent caller with the same idempotency key won
            self._discard(jdir, run_id)
            return self.get(got)
        local.after_pass(self.store, decided)
        return self.get(job_id)

    def existing(self, spec: JobSpec) -> JobInfo | None:
        """The job already launched with this spec's idempotency key, if any."""
        if not spec.idempotency_key:
            return None
        rows = self.store.rows("WHERE idempotency_key=?", (spec.idempotency_key,))
        return row_to_info(rows[0]) if rows else None

    def prepare(self, spec: JobSpec, tags: dict[str, str] | None = None) -> PreparedJob:
        """The job's folder (config, data links) and its MLflow run, before it is recorded.

        Every backend launches through this: one place decides what a job's folder holds.
        """
        job_id = new_job_id()
        jdir = self.home / "jobs" / job_id
        jdir.mkdir(parents=True)
        (jdir / "config.json").write_text(json.dumps(spec.config, indent=1))
        (jdir / "data").mkdir()
        self._link_data(spec, jdir)
        name = spec.name or Path(spec.command[0]).name
        job = PreparedJob(job_id, jdir, jdir / "output.log", name)
        if spec.track:
            try:
                job.run_id, job.experiment_id = self.tracker.create_run(
                    job_id=job_id,
                    name=job.name,
                    experiment=spec.experiment,
                    config=spec.config,
                    tags={**spec.tags, **(tags or {})},
                )
                self._log_data_inputs(spec, job.run_id)
            except TrackingUnavailable as exc:
                job.tracking_note = f"tracking unavailable: {exc.message}"
        return job

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

    def _check_gpus(self, spec: JobSpec) -> None:
        total = len(provider().devices())
        if spec.gpus > total:
            raise InsufficientGpus(
                f"the job asks for {spec.gpus} GPUs but this machine has {total}"
                f" ({provider().note})",
                hint=f"ask for at most {total} GPUs, or use backend 'ray' for a cluster",
                requested=spec.gpus,
                available=total,
            )

    def _check_data(self, spec: JobSpec) -> JobSpec:
        """Resolve data inputs under AIR_DATA_ROOTS and fingerprint them (real paths, digests)."""
        if not spec.data:
            return spec
        from air_skills.tracking.data import prepare_inputs

        return spec.model_copy(update={"data": prepare_inputs(spec.data, self.home, spec.workdir)})

    def _link_data(self, spec: JobSpec, jdir: Path) -> None:
        if not spec.data:
            return
        from air_skills.tracking.data import link_inputs

        link_inputs(spec.data, jdir / "data")

    def _log_data_inputs(self, spec: JobSpec, run_id: str) -> None:
        if not spec.data:
            return
        from air_skills.tracking.data import log_inputs

        log_inputs(self.tracker, run_id, spec.data)

    def _dry_run_info(self, spec: JobSpec) -> JobInfo:
        free = len(local.schedulable_gpus(self.store))
        from datetime import datetime

        return JobInfo(
            job_id="dry-run",
            name=spec.name or Path(spec.command[0]).name,
            status=JobStatus.QUEUED,
            message=(
                f"DRY RUN: would run {spec.command!r} in {spec.workdir} with {spec.gpus} GPU(s)"
                f" ({free} schedulable), priority {spec.priority}, project {spec.project};"
                " nothing was launched"
            ),
            priority=spec.priority,
            created_at=datetime.now(UTC),
            backend=spec.backend,
            project=spec.project or "default",
            data=[f"{d.name}@{(d.digest or '?')[:12]}" for d in spec.data],
        )

    def _discard(self, jdir: Path, run_id: str | None) -> None:
        import shutil

        shutil.rmtree(jdir, ignore_errors=True)
        if run_id:
            try:
                self.tracker.client.delete_run(run_id)
            except Exception:
                pass

    # --- reading ------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """Settle records whose supervisor (or Ray job) is gone; start what can start."""
        local.reconcile(self.store)
        if self.store.rows("WHERE backend='ray' AND status IN ('QUEUED','RUNNING') LIMIT 1"):
            from air_skills.backends.ray import RayBackend

            RayBackend(self).reconcile()

    def _row(self, job_id: str) -> Any:
        row = self.store.row(check_job_id(job_id))
        if row is None:
            raise NotFound(
                f"no job {job_id!r}",
                hint="list jobs with `air ls` (MCP: list_jobs)",
                job_id=job_id,
            )
        return row

    def get(self, job_id: str) -> JobInfo:
        check_job_id(job_id)
        self.reconcile()
        return row_to_info(self._row(job_id))

    def list(
        self,
        status: str | JobStatus | None = None,
        experiment: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        project: str | None = None,
    ) -> Page[JobInfo]:
        self.reconcile()
        where, args = ["1=1"], []
        if status is not None:
            try:
                value = JobStatus(str(status).upper()).value
            except ValueError:
                raise InvalidInput(
                    f"unknown status {status!r}",
                    hint="use one of " + ", ".join(s.value for s in JobStatus),
                    valid_keys=[s.value for s in JobStatus],
                ) from None
            where.append("status=?")
            args.append(value)
        if experiment is not None:
            where.append("json_extract(spec, '$.experiment') IS ?")
            args.append(experiment)
        if project is not None:
            from air_skills.quotas import check_project

            check_project(self, project)  # a typo lists the known projects, not an empty page
            where.append("project=?")
            args.append(project)
        if cursor:
            if not cursor.isdigit():
                raise InvalidInput(f"bad cursor {cursor!r}", hint="pass next_cursor as given")
            where.append("seq < ?")
            args.append(int(cursor))
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit {limit} out of range", hint="use 1 to 1000")
        rows = self.store.rows(
            f"WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?", (*args, limit + 1)
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page[JobInfo](
            items=[row_to_info(r) for r in rows],
            next_cursor=str(rows[-1]["seq"]) if more else None,
        )

    def logs(self, job_id: str, tail: int | None = 100, offset: int | None = None) -> LogChunk:
        """The last ``tail`` lines, or (with ``offset``) the bytes from that offset on."""
        row = self._row(job_id)
        if row["backend"] == "ray":  # Ray holds the output: bring the log file up to date
            from air_skills.backends.ray import RayBackend

            RayBackend(self).sync_logs(row)
        path = row["log_path"]
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                if offset is not None:
                    if offset < 0:
                        raise InvalidInput("offset must be >= 0", hint="pass next_offset as given")
                    start = min(offset, size)
                    f.seek(start)
                    data = f.read(MAX_LOG_BYTES)
                    return LogChunk(
                        job_id=job_id,
                        text=data.decode("utf-8", "replace"),
                        offset=start,
                        next_offset=start + len(data),
                        size=size,
                        truncated=start + len(data) < size,
                    )
                start = max(0, size - MAX_LOG_BYTES)
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return LogChunk(job_id=job_id, text="", offset=0, next_offset=0, size=0)
        lines = data.split(b"\n")
        keep = (tail or 0) + (1 if data.endswith(b"\n") else 0)
        if tail is not None and len(lines) > keep:
            kept = b"\n".join(lines[-keep:])
            start = size - len(kept)
            data = kept
        return LogChunk(
            job_id=job_id,
            text=data.decode("utf-8", "replace"),
            offset=start,
            next_offset=size,
            size=size,
            truncated=start > 0,
        )

    def metrics(
        self,
        job_id: str,
        keys: list[str] | None = None,
        history: bool = False,
        max_points: int = 200,
    ) -> Metrics:
        row = self._row(job_id)
        run_id = row["run_id"]
        if not run_id:
            raise NotFound(
                f"job {job_id} has no MLflow run (launched with track=false, or tracking was"
                " unavailable)",
                hint="read its summary with `air logs`",
                job_id=job_id,
            )
        latest = self.tracker.latest(run_id)
        if keys:
            missing = [k for k in keys if k not in latest]
            if missing:
                from air_skills.errors import UnknownMetric

                raise UnknownMetric(
                    f"job {job_id} has no metric {', '.join(missing)}",
                    hint="metrics logged: " + (", ".join(sorted(latest)) or "none yet"),
                    valid_keys=sorted(latest),
                    job_id=job_id,
                )
        hist = {}
        if history:
            hist = self.tracker.history(run_id, keys or sorted(latest), max_points, latest)
        return Metrics(job_id=job_id, run_id=run_id, latest=latest, history=hist)

    def compare(self, job_ids: list[str], metric: str | None = None) -> list[dict[str, Any]]:
        """A compact table: job, status, config diff against the first job, latest, best, step."""
        from air_skills.tracking.compare import compare_jobs

        return compare_jobs(self, job_ids, metric)

    def wait(
        self,
        job_ids: Iterable[str],
        timeout_s: float | None = None,
        any: bool = True,
        on_progress: Callable[[list[JobInfo]], None] | None = None,
    ) -> list[JobInfo]:
        """Wait until any (or all) of the jobs end, or the timeout; returns their infos."""
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            raise InvalidInput("no job ids to wait for", hint="pass one or more job ids")
        for job_id in ids:
            self._row(job_id)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = 0.02
        while True:
            self.reconcile()
            infos = [row_to_info(self._row(j)) for j in ids]
            if on_progress:
                on_progress(infos)
            done = [i.status.is_terminal() for i in infos]
            if (any and True in done) or all(done):
                return infos
            if deadline is not None and time.monotonic() >= deadline:
                return infos
            sleep = delay if deadline is None else min(delay, max(0, deadline - time.monotonic()))
            time.sleep(sleep)
            delay = min(delay * 1.5, 0.5)

    # --- cancelling ----------------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str | None = None, wait_s: float = 15.0) -> JobInfo:
        """Cancel a queued or running job (SIGTERM, then SIGKILL after the grace period)."""
        row = self._row(job_id)
        reason = reason or "cancelled by request"
        if row["backend"] == "ray":
            from air_skills.backends.ray import RayBackend

            return RayBackend(self).cancel(row, reason)
        with self.store.tx() as c:
            current = c.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            status = JobStatus(current["status"])
            if status.is_terminal():
                raise InvalidState(
                    f"job {job_id} already finished ({status.value}); nothing to cancel",
                    hint=f"read it with `air status {job_id}`",
                    job_id=job_id,
                    status=status.value,
                )
            if status == JobStatus.QUEUED:
                self.store.finish(
                    job_id, JobStatus.CANCELLED, message=f"CANCELLED: {reason}", c=c
                )
            else:
                self.store.request_stop(c, job_id, "cancel", reason)
        if status == JobStatus.RUNNING:
            local.signal_stop(current)
            self.wait([job_id], timeout_s=wait_s)
        return self.get(job_id)

    def cancel_all(self, reason: str | None = None) -> list[JobInfo]:
        rows = self.store.rows("WHERE status IN ('QUEUED','RUNNING') ORDER BY seq")
        out = []
        for row in rows:
            try:
                out.append(self.cancel(row["job_id"], reason, wait_s=0))
            except InvalidState:
                out.append(self.get(row["job_id"]))
        ids = [i.job_id for i in out if not i.status.is_terminal()]
        if ids:
            out = self.wait(ids, timeout_s=15, any=False) + [
                i for i in out if i.status.is_terminal()
            ]
        return out

    # --- GPUs ------------------------------------------------------------------------------------

    def gpus(self) -> list[GpuInfo]:
        self.reconcile()
        cordons = self.store.gpu_rows()
        holders: dict[int, list[str]] = {}
        held_by: dict[int, Any] = {}
        for r in self.store.rows("WHERE status='RUNNING' AND backend='local'"):
            for g in json.loads(r["gpus"]):
                holders.setdefault(g, []).append(r["job_id"])
                held_by[g] = r
        out = []
        devices = provider().devices()
        # Health is the stored verdict (unhealthy from a failed check until uncordoned) or a
        # critical fault that the check finds now.
        failing: dict[int, list[str]] = {}
        for f in provider().faults([d.index for d in devices]):
            if f.critical and f.index >= 0:
                failing.setdefault(f.index, []).append(f"{f.kind}: {f.detail}")
        for d in devices:
            c = cordons.get(d.index)
            cordoned = bool(c and c["cordoned"])
            now_failing = "; ".join(failing.get(d.index, [])) or None
            out.append(
                GpuInfo(
                    index=d.index,
                    name=d.name,
                    memory_mb=d.memory_mb,
                    health="unhealthy" if now_failing else (c["health"] if c else "ok"),
                    cordoned=cordoned,
                    reason=(c["reason"] if cordoned else None) or now_failing,
                    job_ids=holders.get(d.index, []),
                    project=held_by[d.index]["project"] if d.index in held_by else None,
                    borrowing=bool(d.index in held_by and held_by[d.index]["borrowing"]),
                )
            )
        return out

    def holders(self) -> dict[str, str]:
        """Each running job as `job-id (project)`, or `(project, borrowing)` beyond its quota."""
        return {
            r["job_id"]: f"{r['job_id']} ({r['project']}"
            + (", borrowing)" if r["borrowing"] else ")")
            for r in self.store.rows("WHERE status='RUNNING'")
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
