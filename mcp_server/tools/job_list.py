"""list_jobs: a page of jobs (filtered, a batch's, or a leaderboard), with seed groups over all."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from air_skills.client import Client
from air_skills.errors import InvalidInput
from air_skills.gpu.hardware import hardware_class, not_comparable
from air_skills.models import JobInfo, Page
from air_skills.runtime.supervision.stall_words import note as stall_note
from mcp_server.schemas import JobPage, JobSummary
from mcp_server.tools.batch import GroupBy, groups_of
from mcp_server.tools.params import Direction, MetricName, StatusName
from mcp_server.tools.replies import shown_status, to_score

CURSOR_RE = re.compile(r"[0-9]{1,18}")


def list_jobs(
    client: Client,
    status: Annotated[StatusName | None, Field(description="only jobs in this status")] = None,
    experiment: Annotated[str | None, Field(max_length=500, description="only its jobs")] = None,
    limit: Annotated[int, Field(ge=1, le=100, description="jobs per page")] = 20,
    cursor: Annotated[
        str | None, Field(max_length=40, description="next_cursor of the previous page")
    ] = None,
    metric: MetricName = None,
    order_by: Annotated[
        Literal["best", "latest"] | None,
        Field(description="a leaderboard by the metric's best or latest"),
    ] = None,
    direction: Direction = "minimize",
    group_by: GroupBy = None,
    launched_by: Annotated[
        str | None, Field(max_length=64, description="only this identity's jobs")
    ] = None,
    batch_id: Annotated[str | None, Field(max_length=60, description="only its jobs")] = None,
    config: Annotated[dict[str, Any] | None, Field(description="key: value")] = None,
    study: Annotated[str | None, Field(max_length=200)] = None,
) -> JobPage:
    """Jobs newest first, one line each; with metric, each one's latest and best value; with
    order_by, a leaderboard (best first)."""
    # The client's own check (str.isdigit) lets "²" and 40-digit numbers through to int() and
    # SQLite: a cursor is what next_cursor gave, a row number of at most 18 ASCII digits.
    if cursor is not None and not CURSOR_RE.fullmatch(cursor):
        raise InvalidInput(
            f"bad cursor {cursor[:40]!r}: not a next_cursor from list_jobs",
            hint="pass next_cursor exactly as the previous page gave it, or no cursor",
        )
    if order_by is not None and not metric:
        raise InvalidInput("order_by needs a metric", hint="pass metric='val_loss' too")
    if batch_id is not None and (config or study):
        raise InvalidInput("config and study do not filter a batch", hint="drop batch_id")
    if batch_id is not None:
        page, every = _batch_page(
            client, batch_id, status, launched_by, limit, cursor, metric, order_by, direction
        )
    else:
        page, every = _page(
            client, status, experiment, limit, cursor, metric, order_by, direction, launched_by,
            config, study,
        )  # fmt: skip
    page_ids = [j.job_id for j in page.items]
    scores = client.scores(page_ids, metric, direction) if metric else {}
    # Seed groups over every job that matches (the batch's, else the filters'), not the page:
    # a single lucky seed on this page does not top a config whose other seeds are elsewhere.
    # Without a batch, the groups are those of the page's configs, each over all its runs.
    groups = None
    if group_by:
        around = None if batch_id is not None else page_ids
        groups = groups_of(client, every(), metric, direction, group_by, around=around)
    several = len({j.launched_by for j in page.items}) > 1
    return _job_page(page, scores, groups, several, metric)


Pages = tuple[Page[JobInfo], Callable[[], list[str]]]


def _page(
    client: Client,
    status: str | None,
    experiment: str | None,
    limit: int,
    cursor: str | None,
    metric: str | None,
    order_by: str | None,
    direction: str,
    launched_by: str | None,
    config: dict[str, Any] | None = None,
    study: str | None = None,
) -> Pages:
    """The page the filters give, and how to read every job they match."""
    page = client.list(
        status=status,
        experiment=experiment,
        limit=limit,
        cursor=cursor,
        metric=metric,
        order_by=order_by,
        direction=direction,  # type: ignore[arg-type]
        launched_by=launched_by,
        config=config,
        study=study,
    )
    if config or study:  # seed groups over every job these filters match too
        from air_skills.runtime.store.results_index import Where

        where = Where(status=status, experiment=experiment, launched_by=launched_by,
                      config=config or {}, study=study)  # fmt: skip
        sql, args = where.sql()
        query = f"SELECT j.job_id FROM jobs j WHERE {sql} ORDER BY j.seq DESC LIMIT ?"
        return page, lambda: [r[0] for r in client.store.read(query, (*args, GROUPS_POOL))]
    return page, lambda: matching_job_ids(client, status, experiment, launched_by)


def matching_job_ids(
    client: Client, status: str | None, experiment: str | None, launched_by: str | None
) -> list[str]:
    """Every job id the filters match, newest first (for seed groups over all of them).
    A hook for the results index (issue 41.1): it may answer this from its own table."""
    rows = client.store.page_rows(
        status=status, experiment=experiment, launched_by=launched_by, limit=GROUPS_POOL
    )
    return [r.job_id for r in rows]


GROUPS_POOL = 5_000  # seed groups read at most this many matching jobs


def _batch_page(
    client: Client,
    batch_id: str,
    status: str | None,
    launched_by: str | None,
    limit: int,
    cursor: str | None,
    metric: str | None,
    order_by: str | None,
    direction: str,
) -> Pages:
    """A batch's jobs as a page (item order, or ranked by the metric: non-finite last); the
    cursor is the place of the page's first job."""
    from air_skills.backends.info import row_to_info
    from air_skills.runtime.results.finite import finite_or_none
    from air_skills.runtime.store.batches import IN_BATCH

    order = {j: n for n, j in enumerate(client.batch_job_ids(batch_id))}  # unknown: refused
    client.reconcile()

    infos = [row_to_info(r) for r in client.store.rows(f"WHERE {IN_BATCH}", (batch_id,))]
    infos = [
        i
        for i in infos
        if (status is None or i.status.value == status)
        and (launched_by is None or i.launched_by == launched_by)
    ]
    infos.sort(key=lambda i: order.get(i.job_id, 0))
    if order_by and metric:
        got = client.scores([i.job_id for i in infos], metric, direction)
        sign = 1 if direction == "minimize" else -1

        def rank(info: JobInfo) -> tuple[int, float]:
            value = finite_or_none((got.get(info.job_id) or {}).get(order_by))
            return (1, 0.0) if value is None else (0, sign * value)

        infos.sort(key=rank)
    start = int(cursor) if cursor else 0
    shown = infos[start : start + limit]
    more = start + limit < len(infos)
    page = Page[JobInfo](
        items=shown, next_cursor=str(start + limit) if more else None, total=len(infos)
    )
    return page, lambda: [i.job_id for i in infos]


def _job_page(
    page: Page[JobInfo],
    scores: dict[str, Any],
    groups: list[Any] | None,
    several: bool,
    metric: str | None,
) -> JobPage:
    # Who launched each job, where the page holds more than one launcher (the shared board);
    # a page of one launcher's jobs says nothing 50 times over.
    return JobPage(
        groups=groups,
        items=[
            JobSummary(
                job_id=j.job_id,
                name=j.name if len(j.name) <= 60 else j.name[:57] + "...",
                status=shown_status(j),
                failure_kind=j.failure_kind,
                score=to_score(scores.get(j.job_id)),
                launched_by=j.launched_by if several else None,
                stalled=stall_note(j.message),
            )
            for j in page.items
        ],
        next_cursor=page.next_cursor,
        total=page.total,
        metric=metric,
        # a leaderboard across hardware classes ranks values that do not compare: say so
        hardware=not_comparable([hardware_class(j.hardware) for j in page.items])
        if metric
        else None,
    )
