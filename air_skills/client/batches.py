"""The Client's launches of many jobs at once: a batch over seeds and a grid, seed groups,
and launches on another job's code."""

from __future__ import annotations

from typing import Any

from air_skills.errors import AirError
from air_skills.models import JobInfo, JobSpec
from air_skills.vocabulary import Direction


class BatchMixin:
    """Many jobs in one call, grouped over seeds (mixed into ``Client``)."""

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
