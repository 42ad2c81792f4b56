"""The Client's launches of many jobs at once: a batch over seeds and a grid, seed groups,
and launches on another job's code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from air_skills.errors import AirError
from air_skills.vocabulary import Direction

if TYPE_CHECKING:
    from air_skills.models import JobInfo, JobSpec


class BatchMixin:
    """Many jobs in one call, grouped over seeds (mixed into ``Client``)."""

    def launch_many(
        self,
        specs: list[dict[str, Any]],
        dry_run: bool = False,
        idempotency_key: str | None = None,
        batch_id: str | None = None,
        limit: int | None = None,
    ) -> list[JobInfo]:
        """Launch many jobs as one: every item validated and dry-run checked (executable,
        script, data, patch, idempotency key) before any is queued; one refused item refuses
        them all, each problem named. Item n without its own key gets ``idempotency_key#n``.
        An item whose experiment is queued, running or done (AIR_DEDUP) is not queued: its
        place holds that job, its message saying DUPLICATE; an item whose key a job holds
        already is that job (ALREADY LAUNCHED). Each item's job is recorded under
        ``batch_id`` (made here when None) as it is queued. ``limit``: the most items
        (default ``MAX_ITEMS``, an MCP call's; a CLI sweep takes ``MAX_SWEEP``)."""
        from air_skills.batch import MAX_ITEMS, launch_all
        from air_skills.runtime.launch.duplicates import one_call
        from air_skills.runtime.store import batches

        batch = batch_id or batches.new_batch_id()
        with self._one_snapshot(specs, dry_run), one_call():
            return launch_all(
                specs,
                check=lambda spec: self._launch(spec, True, strict=True),
                launch=None if dry_run else self._launch_or_duplicate,
                idempotency_key=idempotency_key,
                key_used=lambda key: self.store.by_idempotency_key(key) is not None,
                launched=lambda done: batches.add_jobs(
                    self.store, batch, [(n, info.job_id) for n, info in done]
                ),
                limit=limit or MAX_ITEMS,
                launch_group=None if dry_run else self._launch_group,
            )

    def _launch_group(self, specs: list[dict[str, Any]]) -> list[JobInfo]:
        """A group of a batch's items launched as one, each made ready as a launch of its own,
        then queued in one transaction by a backend that can (the local one's queue_group);
        otherwise, or when an item is refused as a duplicate, one at a time
        (``_launch_or_duplicate``: its place holds that job)."""
        from air_skills.backends.info import row_to_info
        from air_skills.models import JobSpec
        from air_skills.runtime.launch import duplicates
        from air_skills.runtime.launch.prepare import check_reserve

        check_reserve(self.home)  # once for the group (each item's _ready skips it)
        ready = [self._ready(JobSpec.parse(s), False, None, False, True, False)[0] for s in specs]
        names = {r.backend for r in ready}
        backend = self.backend(ready[0].backend) if len(names) == 1 else None
        if not hasattr(backend, "queue_group"):
            return [self._launch_or_duplicate(s) for s in specs]
        keys = [r.idempotency_key for r in ready]
        held = [self.store.by_idempotency_key(k) if k else None for k in keys]
        try:
            rows = backend.queue_group(ready)  # type: ignore[union-attr]
        except AirError as exc:
            if exc.code != "duplicate":
                raise
            return [self._launch_or_duplicate(s) for s in specs]
        duplicates.queued(r.job_id for r in rows)  # each item's note: only those before it
        out = []
        for row, key, was in zip(rows, keys, held, strict=True):
            info = row_to_info(row)
            info.message += self._launched(row.job_id, row.code is not None)
            if was is not None and was.job_id == info.job_id:
                note = f"ALREADY LAUNCHED with idempotency key {key!r}, not queued again"
                info = info.model_copy(update={"message": f"{note}; {info.message}"})
            out.append(info)
        return out

    def _one_snapshot(self, specs: list[dict[str, Any]], dry_run: bool) -> Any:
        """A batch whose items all snapshot one folder runs on one snapshot of it, taken once
        (the items cannot see two states of the tree; 1,000 items: one walk of the tree, not
        1,000). A context manager; nothing pinned for a dry run, live code, one item, or items
        of several folders."""
        import contextlib

        from air_skills.runtime.code.job_code import pinned_snapshot
        from air_skills.runtime.code.snapshot import take_snapshot

        folders = {s.get("workdir") for s in specs if isinstance(s, dict)}
        live = any(isinstance(s, dict) and s.get("code") == "live" for s in specs)
        if dry_run or live or len(specs) < 2 or len(folders) != 1:
            return contextlib.nullcontext()
        from air_skills.models import JobSpec

        folder = self._resolve(JobSpec.parse(specs[0])).workdir
        assert folder is not None  # _resolve sets it
        return pinned_snapshot(take_snapshot(self.home, folder, store=True))

    def _launch_or_duplicate(self, spec: JobSpec | dict[str, Any]) -> JobInfo:
        """Launch (a batch's item): a duplicate gives the job that already runs it, a used
        idempotency key the job that holds it."""
        key = spec.get("idempotency_key") if isinstance(spec, dict) else spec.idempotency_key
        held = self.store.by_idempotency_key(key) if key else None
        try:
            info = self._launch(spec, False, batch=True)
        except AirError as exc:
            if exc.code != "duplicate":
                raise
            info = self.get(str(exc.context["job_id"]))
            return info.model_copy(update={"message": f"DUPLICATE, not queued: {exc.message}"})
        if held is not None and held.job_id == info.job_id:
            note = f"ALREADY LAUNCHED with idempotency key {key!r}, not queued again"
            return info.model_copy(update={"message": f"{note}; {info.message}"})
        return info

    def batch_job_ids(self, batch_id: str) -> list[str]:
        """The jobs of a batch (a launch_jobs call or an `air launch` sweep), in item order."""
        from air_skills.errors import NotFound
        from air_skills.runtime.store import batches

        found = batches.job_ids(self.store, batch_id)
        if not found:
            raise NotFound(
                f"no batch {batch_id[:60]!r}",
                hint="pass the batch_id that launch_jobs or `air launch --seeds/--grid` gave",
                batch_id=batch_id,
            )
        return found

    def cancel_batch(
        self, batch_id: str, reason: str | None = None, wait_s: float = 0.0
    ) -> list[JobInfo]:
        """Cancel every queued or running job of a batch: queued ones end at once (local ones
        in one transaction), running ones are told to stop (SIGTERM, then SIGKILL after the
        grace period) and waited for up to ``wait_s`` (0: not waited; wait_for_jobs on the
        batch sees them end); ended ones stay as they are. Each job is checked as ``cancel``
        checks it (who may stop it)."""
        from air_skills.backends.info import row_to_info
        from air_skills.errors import InvalidState
        from air_skills.runtime.store.batches import IN_BATCH

        self.batch_job_ids(batch_id)  # an unknown batch is refused by name
        reason = reason or "cancelled by request"
        rows = self.store.rows(f"WHERE {IN_BATCH} ORDER BY seq", (batch_id,))
        live = [r for r in rows if r.status in ("QUEUED", "RUNNING")]
        for row in live:
            self._may_stop(row)  # another's job refuses the whole call before any is cancelled
        local = self.backend("local")
        done = set()
        queued = [r for r in live if r.status == "QUEUED" and r.backend == "local"]
        if queued and hasattr(local, "cancel_queued"):
            done = local.cancel_queued(queued, reason)
        for row in live:
            if row.job_id in done:
                continue
            try:
                self.cancel(row.job_id, reason, wait_s=0)
            except InvalidState:  # it ended meanwhile
                pass
        stopping = [r.job_id for r in live if r.job_id not in done]
        if stopping and wait_s > 0:
            self.wait(stopping, timeout_s=wait_s, any=False)
        self.reconcile()
        by_id = {r.job_id: r for r in self.store.rows(f"WHERE {IN_BATCH}", (batch_id,))}
        return [row_to_info(by_id[r.job_id]) for r in rows]

    def seed_groups(
        self,
        job_ids: list[str],
        metric: str,
        direction: Direction = "minimize",
        seed_key: str = "seed",
        around: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """The jobs grouped by all but their seed (spec, code, config but ``seed_key``): n,
        mean and std of the metric's final value over SUCCEEDED members (a non-finite value:
        diverged, counted); best mean first. With ``around``, only the groups of those jobs
        (each over all of its members among ``job_ids``: only they are scored)."""
        from air_skills.batch import code_digest, group_key, seed_groups_of

        self.reconcile()
        rows = [self._row(j) for j in dict.fromkeys([*job_ids, *(around or [])])]
        if around is not None:

            def key(r: Any) -> str:
                return group_key(r.spec_dict(), code_digest(r.code), seed_key)

            wanted = {key(r) for r in rows if r.job_id in set(around)}
            rows = [r for r in rows if key(r) in wanted]
        scores = self.scores([r.job_id for r in rows], metric, direction)
        return seed_groups_of(rows, scores, seed_key, direction)

    def launch_on(self, job_id: str, spec: JobSpec | dict[str, Any]) -> JobInfo:
        """Launch ``spec`` on ``job_id``'s stored code: its snapshot, and its patch unless the
        spec brings one (a study's ``base_job``: trials run the code that job ran)."""
        from air_skills.runtime.code.code_source import load_job_code, rerun_snapshot
        from air_skills.runtime.code.job_code import pinned_snapshot

        row = self._row(job_id)
        snapshot = rerun_snapshot(load_job_code(self.home, row.job_id, row.code))
        from air_skills.models import JobSpec

        spec = JobSpec.parse(spec)
        if spec.patch is None and row.spec_dict().get("patch"):
            spec = spec.model_copy(update={"patch": row.spec_dict()["patch"]})
        with pinned_snapshot(snapshot):
            return self._launch(spec, False, snapshot)
