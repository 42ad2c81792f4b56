"""The Client's reads of what jobs produced: logs (paged and searched), metrics, scores and
comparisons."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from air_skills.errors import InvalidInput, NotFound
from air_skills.runtime.results.log_read import BadOffset, read_log
from air_skills.runtime.results.log_search import BadPattern, LogSearch, search_log
from air_skills.vocabulary import Direction

if TYPE_CHECKING:
    from air_skills.models import LogChunk, Metrics


class ResultsMixin:
    """Logs, metrics and comparisons (mixed into ``Client``)."""

    def scores(
        self,
        job_ids: list[str],
        metric: str,
        direction: Direction = "minimize",
        at_step: int | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Per job: the metric's latest value and step, best (the best finite value; the
        latest when none is finite) and its step, ``points`` and ``finite`` (whether the latest
        is a usable number), from the results index (runtime/store/results_index.py; running
        jobs and ends a kill cut short are read from MLflow first). Jobs without the metric
        are left out. With ``at_step``, the value at that step too, from MLflow's histories."""
        if at_step is not None:
            from air_skills.tracking.compare import metric_scores

            found = metric_scores(
                [self._row(j) for j in job_ids], self.tracker, metric, direction, at_step
            )
            return {job_id: score for job_id, score in found.items() if score}
        from air_skills.runtime.runs.run_index import catch_up
        from air_skills.runtime.store import results_index

        ids = list(dict.fromkeys(self._row(j).job_id for j in job_ids))  # unknown: refused
        catch_up(self.store, ids)
        results = results_index.read(self.store, ids, metric)
        return {j: results[j].score(direction) for j in ids if j in results}

    def search_log(
        self,
        job_id: str,
        pattern: str,
        last_match: bool = False,
        max_matches: int = 20,
        start: int = 0,
    ) -> LogSearch:
        """Lines of the job's log that match a regular expression (line numbers, byte offsets),
        from byte ``start`` on; at most AIR_LOG_SEARCH_MAX_MB read per call (``stopped_at``:
        where to go on from)."""
        row = self._row(job_id)
        self.backend(row.backend).logs(row)  # Ray holds the output: bring the file up to date
        try:
            return search_log(row.log_path, pattern, last_match, max_matches, start=start)
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
        from air_skills.models import LogChunk

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
        from air_skills.models import Metrics

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
        # Without at_step the scores come from the results index, not the whole histories.
        scores = None
        if metric and at_step is None:
            found = self.scores([r.job_id for r in rows], metric, direction)
            keep = ("latest", "step", "best", "best_step")
            scores = {j: {k: sc[k] for k in keep} for j, sc in found.items()}
        return compare_jobs(rows, self.tracker, metric, direction, at_step, scores)
