"""The local backend: jobs on this machine's GPUs, each run by its own supervisor process."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from air_skills.backends.base import already_finished
from air_skills.backends.images import attach_image, image_tags, resolve_image
from air_skills.backends.info import row_to_info
from air_skills.backends.sandboxing import resolve_sandbox
from air_skills.errors import InsufficientGpus, NotFound
from air_skills.gpu.providers import provider
from air_skills.home import home_checked, write_launch_env
from air_skills.runtime.code.job_code import CodePlan, plan_code
from air_skills.runtime.execution.job_env import launch_environment
from air_skills.runtime.execution.sandbox import describe
from air_skills.runtime.launch import launch_intent
from air_skills.runtime.launch.context import PreparedJob
from air_skills.runtime.launch.duplicates import precheck
from air_skills.runtime.launch.launch_check import program_path
from air_skills.runtime.launch.launch_run import claim_run, give_back_run
from air_skills.runtime.launch.prepare import (
    LaunchContext,
    check_reserve,
    discard_prepared,
    disk_full_named,
    find_by_idempotency_key,
    job_name,
    launcher_tag,
    prepare_job,
    recording_many,
)
from air_skills.runtime.runs.job_run import finish_unstarted
from air_skills.runtime.scheduling import passes
from air_skills.runtime.store.records import JobRecord
from air_skills.runtime.store.store import new_job_id
from air_skills.status import JobStatus
from air_skills.tracking.mlflow import tracking_uri

if TYPE_CHECKING:  # pydantic's: a launch from a shell queues a SpecView without it
    from air_skills.models import JobInfo, JobSpec


class LocalBackend:
    """Queue jobs in the store; scheduling passes start them under supervisors."""

    def __init__(self, runtime: LaunchContext) -> None:
        self.runtime = runtime

    def launch(self, spec: JobSpec, dry_run: bool = False) -> JobInfo:
        """Queue the job and run a scheduling pass: it starts now if its GPUs are free."""
        if not dry_run:
            return row_to_info(self.queue(spec))
        store = self.runtime.store
        self._check_gpus(spec)
        spec = resolve_sandbox(spec, self.runtime.home)  # `on` without one: refused here
        # A key already used for another spec is refused now, as the launch would
        # (a batch checks every item before queueing any: issue 39.2).
        held = find_by_idempotency_key(store, spec.idempotency_key, spec.model_dump(mode="json"))
        spec, _ = resolve_image(spec)
        info = self._dry_run_info(spec, self._code(spec, store=False))
        if held is not None:
            info.message += f"; its idempotency key is {held.job_id}'s: that job, none new"
        return info

    def queue(self, spec: JobSpec) -> JobRecord:
        """``launch`` without its reply model: the job's record as the reply shows it (a
        JobSpec or a SpecView of models/spec_view.py: `air launch` from a shell)."""
        return self.queue_group([spec])[0]

    def queue_group(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        """Queue jobs as one (a batch's items): each checked and its folder built as a launch
        of its own, then all recorded, renamed into place and scheduled in one transaction
        (a refusal or failure of any: none queued, their folders and claimed runs discarded).
        Each item's record; an item whose idempotency key a job holds gets that job. The
        home's checks (its safety, the disk reserve) are made once for the group."""
        home = self.runtime.home
        # A group: one intent lists every job it may make (none of their own), gone last.
        ids = [new_job_id() for _ in specs] if len(specs) > 1 else []
        group = launch_intent.write_group(home, ids) if ids else None
        try:
            return self._queue_prepared(specs, ids)
        finally:
            if group is not None:  # every job recorded, or discarded with its folder
                launch_intent.remove(home, group)

    def _queue_prepared(self, specs: Sequence[JobSpec], ids: list[str]) -> list[JobRecord]:
        """queue_group's work: the items prepared (``ids``: the group's job ids), then
        recorded and scheduled in one transaction."""
        store = self.runtime.store
        home = self.runtime.home
        held: dict[int, JobRecord] = {}
        todo: list[tuple[int, JobSpec, PreparedJob]] = []
        environment = launch_environment(os.environ)  # the same for every item
        try:
            with home_checked(home):
                check_reserve(home)  # a job that filled the disk leaves air room for its state
                self._prepare_group(specs, held, todo, environment, ids)
            gpus = passes.schedulable_gpus(store) if todo else ()
        except BaseException:
            for _, _, job in todo:
                discard_prepared(self.runtime, job)
            raise
        got: dict[int, str] = {}
        decided = []
        # Queued and scheduled at once, in one transaction; the folders take their names in it.
        with recording_many(self.runtime, [job for _, _, job in todo]) as c:
            for n, spec, job in todo:
                claim_run(self.runtime, c, job)  # a spare run, pure SQLite: no MLflow here
                got[n], created = store.queue(
                    spec.model_dump(mode="json"),
                    job.job_id,
                    str(job.log_path),
                    job.name,
                    job.run_id,
                    job.experiment_id,
                    tracking_note=job.tracking_note,
                    c=c,
                    project=spec.resolved_project(),
                    jdir=job.jdir,
                    code_digest=job.code["digest"] if job.code else None,
                )
                if created and job.code is not None:
                    store.set_code(c, job.job_id, job.code)
                if created:
                    decided.append(passes.run_pass(store, c, gpus, new_job=job.job_id))
                else:
                    give_back_run(self.runtime, c, job)
        # A concurrent caller with an item's idempotency key won: the same spec gets its job
        # (ours is discarded); another spec raised idempotency-conflict in queue, and
        # `recording_many` discarded them all and rolled back the spare runs they claimed.
        for result in decided:
            passes.act_on_pass(store, result)
        if got:
            self.reconcile()
        return [held[n] if n in held else self._row(got[n]) for n in range(len(specs))]

    def _prepare_group(
        self,
        specs: Sequence[JobSpec],
        held: dict[int, JobRecord],
        todo: list[tuple[int, JobSpec, PreparedJob]],
        environment: dict[str, str],
        ids: list[str],
    ) -> None:
        """Check each item and build its folder (into ``todo``; a held key's job into
        ``held``): the caller discards ``todo``'s folders if any item fails. ``ids``: the
        job ids a group's intent lists (none: each job writes its own intent)."""
        store = self.runtime.store
        for n, spec in enumerate(specs):
            self._check_gpus(spec)
            spec = resolve_sandbox(spec, self.runtime.home)  # `on` without one: refused
            existing = find_by_idempotency_key(
                store, spec.idempotency_key, spec.model_dump(mode="json")
            )  # the same spec: its job; a different one: idempotency-conflict
            if existing is not None:
                held[n] = existing
                continue
            spec, image = resolve_image(spec)  # its ID now: an unknown image is refused
            code = self._code(spec)  # snapshot and patch checked: a refusal leaves nothing
            precheck(store, spec, code.snapshot.digest if code else None)  # nothing made
            job = prepare_job(
                self.runtime,
                name=job_name(spec.name, spec.command),
                config=spec.config,
                data=spec.data,
                track=spec.track,
                experiment=spec.experiment,
                tags={**spec.tags, **image_tags(image), **launcher_tag(spec)},
                code=code,
                run_later=True,  # the supervisor completes (or makes) the run: job_run.py
                reserve_checked=True,  # once for the group: queue_group
                job_id=ids[n] if ids else None,
            )
            todo.append((n, spec, job))
            attach_image(self.runtime, job, image, tracking_uri(self.runtime.home))
            with disk_full_named(self.runtime.home / "jobs"):
                # Whichever process starts the job, it gets this environment.
                write_launch_env(job.jdir, environment)

    def cancel(self, record: JobRecord, reason: str, wait_s: float) -> JobInfo:
        """A queued job ends at once; a running one is stopped by its supervisor (SIGTERM,
        then SIGKILL after the grace period), waited for up to ``wait_s``."""
        store = self.runtime.store
        job_id = record.job_id
        with store.tx() as c:
            current = store.row_in(c, job_id)
            assert current is not None  # records are never deleted
            status = JobStatus(current.status)
            if status.is_terminal():
                raise already_finished(job_id, status.value)
            if status == JobStatus.QUEUED:
                store.finish(job_id, JobStatus.CANCELLED, message=f"CANCELLED: {reason}", c=c)
            else:
                store.request_stop(c, job_id, "cancel", reason)
        if status == JobStatus.RUNNING:
            passes.signal_stop(current)
            self._wait_ended(job_id, wait_s)
        elif current.run_id:  # no supervisor will end the run of a job that never started
            try:
                finish_unstarted(self.runtime.home, current, JobStatus.CANCELLED.value)
            except Exception:  # the job is cancelled all the same; the run stays as it was
                pass
        return self._info(job_id)

    def cancel_queued(self, records: list[JobRecord], reason: str) -> set[str]:
        """End every one of ``records`` that is still QUEUED, in one transaction (a batch of
        1,000: one write, not 1,000); the ids it ended. Any other is left to ``cancel``."""
        store = self.runtime.store
        ended: list[JobRecord] = []
        with store.tx() as c:
            for record in records:
                current = store.row_in(c, record.job_id)
                if current is not None and current.status == JobStatus.QUEUED.value:
                    store.finish(
                        record.job_id, JobStatus.CANCELLED, message=f"CANCELLED: {reason}", c=c
                    )
                    ended.append(current)
        for current in ended:
            if current.run_id:  # no supervisor will end the run of a job that never started
                try:
                    finish_unstarted(self.runtime.home, current, JobStatus.CANCELLED.value)
                except Exception:  # the job is cancelled all the same; the run stays as it was
                    pass
        return {r.job_id for r in ended}

    def reconcile(self) -> int:
        """Settle RUNNING records whose supervisor is gone (requeue or fail them)."""
        return passes.reconcile(self.runtime.store)

    def logs(self, record: JobRecord) -> None:
        """Nothing to do: the supervisor writes the job's log file as the job runs."""

    def _info(self, job_id: str) -> JobInfo:
        return row_to_info(self._reply_row(job_id))

    def _reply_row(self, job_id: str) -> JobRecord:
        self.reconcile()
        return self._row(job_id)

    def _row(self, job_id: str) -> JobRecord:
        row = self.runtime.store.row(job_id)
        if row is None:  # records are never deleted; this is a broken AIR_HOME
            raise NotFound(f"no job {job_id!r}", hint="list jobs with `air ls`", job_id=job_id)
        return row

    def _wait_ended(self, job_id: str, wait_s: float) -> None:
        """Poll until the job is terminal or ``wait_s`` has passed (the supervisor ends it)."""
        deadline = time.monotonic() + wait_s
        delay = 0.02
        while True:
            self.reconcile()
            row = self.runtime.store.row(job_id)
            if row is None or JobStatus(row.status).is_terminal():
                return
            if time.monotonic() >= deadline:
                return
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.5)

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

    def _code(self, spec: JobSpec, store: bool = True) -> CodePlan | None:
        """The job's checked code snapshot (None for ``code: live``)."""
        if spec.code != "snapshot":
            return None
        assert spec.workdir is not None  # Client resolves it
        return plan_code(self.runtime.home, spec.workdir, spec.patch, store=store)

    def _dry_run_info(self, spec: JobSpec, code: CodePlan | None) -> JobInfo:
        from air_skills.models import CodeInfo, JobInfo

        free = len(passes.schedulable_gpus(self.runtime.store))
        what = code.summary() if code is not None else "live code (no snapshot)"
        assert spec.workdir is not None  # Client resolves it
        program = program_path(spec.command, spec.workdir, (spec.env or {}).get("PATH"))
        if program and spec.image is None:  # which python: one without torch fails late
            what += f"; {spec.command[0]} is {program}"
        return JobInfo(
            job_id="dry-run",
            name=job_name(spec.name, spec.command),
            status=JobStatus.QUEUED,
            message=(
                f"DRY RUN: would run {spec.command!r} in {spec.workdir} with {spec.gpus} GPU(s)"
                f" ({free} schedulable), priority {spec.priority}, project {spec.project};"
                f" {what}; nothing was launched"
            ),
            priority=spec.priority,
            created_at=datetime.now(UTC),
            backend=spec.backend,
            project=spec.project or "default",
            data=[f"{d.name}@{(d.digest or '?')[:12]}" for d in spec.data],
            code=CodeInfo(**code.info()) if code is not None else None,
            sandbox=describe(spec.model_dump(mode="json")),
        )
