"""wait_for_jobs as a plain function, and the pieces that its async twin (``waiting``) uses."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import Field

from air_skills.client import Client
from air_skills.errors import NotFound
from air_skills.models import JobInfo
from air_skills.status import JobStatus
from mcp_server.schemas import WaitReply
from mcp_server.tools.batch import GroupBy, groups_of
from mcp_server.tools.params import Direction, JobIds, MetricName
from mcp_server.tools.replies import job_reply
from mcp_server.wording import job_not_found

MAX_WAIT_S = 600.0
PROGRESS_HEARTBEAT_S = 5.0
LEADERBOARD_DROPS = ("config", "log_path", "code", "experiment_id")


class WaitAborted(Exception):
    """Raised from a progress callback to stop waiting (the caller went away)."""


ProgressFn = Callable[[int, int, str], None]


class WaitProgress:
    """What a wait reports: (ended, total, message) on a status change, and every few seconds."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._key: tuple[str, ...] | None = None
        self._at = 0.0
        self._lock = threading.Lock()

    def update(self, infos: list[JobInfo]) -> tuple[int, int, str] | None:
        """The progress to send for these infos, or None when it would repeat the last one."""
        key = tuple(i.status.value for i in infos)
        now = time.monotonic()
        with self._lock:
            if key == self._key and now - self._at < PROGRESS_HEARTBEAT_S:
                return None
            self._key, self._at = key, now
        counts: dict[str, int] = {}
        for i in infos:
            counts[i.status.value] = counts.get(i.status.value, 0) + 1
        ended = sum(i.status.is_terminal() for i in infos)
        return ended, self.total, ", ".join(f"{n} {s}" for s, n in counts.items())


MANY = 20  # a wait over more jobs lists only those that did not succeed, and counts them all


def batch_ids(client: Client, ids: list[str]) -> list[str]:
    """The job ids, each batch id (``batch-...``, from launch_jobs or `air launch`) in its
    place replaced by its jobs."""
    from air_skills.runtime.store.batches import is_batch_id

    out: list[str] = []
    for one in ids:
        out.extend(client.batch_job_ids(one) if is_batch_id(one) else [one])
    return list(dict.fromkeys(out))


def wait_is_over(infos: list[JobInfo], mode: str) -> bool:
    """Whether any (mode "any") or all of the jobs have ended."""
    ended = [i.status.is_terminal() for i in infos]
    return any(ended) if mode == "any" else all(ended)


def wait_check(
    client: Client, ids: list[str], mode: str, since: float | None = None
) -> tuple[list[JobInfo], list[str]]:
    """One look at the jobs (no waiting): their infos, and (mode any) the ids of those that
    stalled after ``since`` (epoch s); an unknown id is refused."""
    try:
        infos = client.wait(ids, timeout_s=0, any=(mode == "any"))
    except NotFound as exc:
        raise job_not_found(exc) from None
    return stalled_of(client, infos, mode, since)


def stalled_of(
    client: Client, infos: list[JobInfo], mode: str, since: float | None
) -> tuple[list[JobInfo], list[str]]:
    """``infos`` (a job that stalled after ``since`` told so) and the stalled jobs' ids."""
    if mode != "any" or since is None or wait_is_over(infos, mode):
        return infos, []
    return client.stalls(infos, since)


def wait_reply(
    client: Client,
    infos: list[JobInfo],
    mode: str,
    metric: str | None = None,
    direction: str = "minimize",
    group_by: str | None = None,
    stalled: list[str] | None = None,
) -> WaitReply:
    """The jobs' replies (with the metric's latest and best per job, when one is asked); with
    ``group_by``, seed groups, and only the jobs that did not succeed (the groups hold those)."""
    done = wait_is_over(infos, mode)
    groups = None
    counts = None
    if len(infos) > MANY:  # a batch: its counts, and the jobs that did not succeed
        counts = ", ".join(
            f"{n} {s}" for s, n in Counter(i.status.value for i in infos).most_common()
        )
    if group_by:
        ids = [i.job_id for i in infos]
        groups = groups_of(client, ids, metric, direction, group_by)
    if group_by or counts:
        infos = [i for i in infos if i.status != JobStatus.SUCCEEDED]
    if counts:
        infos = [i for i in infos if i.status.is_terminal()][:MANY]
    scores = (
        client.scores([i.job_id for i in infos], metric, direction)  # type: ignore[arg-type]
        if metric
        else {}
    )
    jobs = [job_reply(client, i, scores.get(i.job_id)) for i in infos]
    if metric:  # a round's leaderboard: what the agent launched with and get_job gives in full
        # (config, log path, code snapshot) is not repeated for every job: the round < 4 KB
        jobs = [j.model_copy(update=dict.fromkeys(LEADERBOARD_DROPS)) for j in jobs]
    over = done or bool(stalled)  # a stall ends a wait in mode any: not a timeout
    return WaitReply(
        done=done,
        timed_out=not over,
        jobs=jobs,
        metric=metric,
        groups=groups,
        stalled=stalled,
        counts=counts,
    )


def wait_for_jobs(
    client: Client,
    job_ids: JobIds,
    timeout_s: Annotated[
        float,
        Field(ge=0, le=MAX_WAIT_S, description="at most; call again to go on"),
    ] = 30.0,
    mode: Annotated[
        Literal["any", "all"], Field(description="any: one ended; all: every one")
    ] = "any",
    metric: MetricName = None,
    direction: Direction = "minimize",
    group_by: GroupBy = None,
    on_progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
) -> WaitReply:
    """Wait until any (or all) jobs end or one stalls, up to timeout_s (timed_out: call
    again); with metric, each one's latest and best: wait and decide in one call."""
    # (on_progress gets (ended, total, message) when a status changes, and every few seconds;
    # setting `stop` ends the wait with WaitAborted: the caller went away. The MCP server runs
    # the async twin in mcp_server.waiting instead, which holds no thread while it waits.)
    ids = batch_ids(client, list(job_ids))
    tracker = WaitProgress(len(ids))

    def progress(infos: list[JobInfo]) -> None:
        if stop is not None and stop.is_set():
            raise WaitAborted()
        if on_progress is None:
            return
        update = tracker.update(infos)
        if update is not None:
            on_progress(*update)

    since = time.time()
    try:
        infos = client.wait(ids, timeout_s=timeout_s, any=(mode == "any"), on_progress=progress)
    except NotFound as exc:
        raise job_not_found(exc) from None
    infos, stalled = stalled_of(client, infos, mode, since)
    return wait_reply(client, infos, mode, metric, direction, group_by, stalled or None)
