"""The job tools as plain functions over ``air_skills.Client``: no MCP in here.

Each takes the client first and typed, described parameters after it (their signatures are the
tool schemas); each returns a compact reply model (``mcp_server.schemas``) and raises
``AirError`` for a call that cannot be done. A failed training run is not an error:
``get_job`` returns it, FAILED, with its log tail.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from air_skills.client import Client
from air_skills.errors import AirError, InvalidInput, InvalidState, NotFound
from air_skills.models import DataInput, JobInfo
from air_skills.status import JobStatus
from mcp_server.render import clean_output
from mcp_server.schemas import (
    CompareReply,
    CompareRow,
    GpuList,
    JobPage,
    JobReply,
    JobSummary,
    MetricsReply,
    WaitReply,
)
from mcp_server.wording import job_not_found, mcp_wording

# --- bounds: what one reply may carry ---------------------------------------------------------

FAILED_TAIL_LINES = 12
FAILED_TAIL_CHARS = 1_000
MAX_CONFIG_BYTES = 1_000_000
MAX_WAIT_S = 600.0
PROGRESS_HEARTBEAT_S = 5.0
CURSOR_RE = re.compile(r"[0-9]{1,18}")


# --- parameter types, shared by the functions and their tool schemas -------------------------

JobId = Annotated[
    str,
    Field(
        description="a job id, as launch_job or list_jobs gave it (job-0123456789)",
        max_length=200,
    ),
]
JobIds = Annotated[list[JobId], Field(min_length=1, max_length=100, description="job ids")]
ShortText = Annotated[str, Field(max_length=500)]
Arg = Annotated[str, Field(max_length=100_000)]
StatusName = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]


def _reply(client: Client, info: JobInfo) -> JobReply:
    tail = None
    if info.status in (JobStatus.FAILED, JobStatus.TIMED_OUT):
        tail = _log_tail(client, info.job_id)
    fields = info.model_dump()
    fields["message"] = mcp_wording(info.message)
    return JobReply(**fields, log_tail=tail)


def _log_tail(client: Client, job_id: str) -> str | None:
    try:
        text = clean_output(client.logs(job_id, tail=FAILED_TAIL_LINES).text)
    except AirError:
        return None
    text = text.rstrip("\n")
    if len(text) > FAILED_TAIL_CHARS:
        text = "..." + text[-FAILED_TAIL_CHARS:]
    return text or None


def launch_job(
    client: Client,
    command: Annotated[
        list[Arg],
        Field(
            min_length=1,
            max_length=1000,
            description='argv list, e.g. ["python", "train.py", "--lr", "3e-4"]; run as is, never'
            " by a shell (so ; | $ and quotes are passed literally)",
        ),
    ],
    name: Annotated[str | None, Field(max_length=200, description="a short name")] = None,
    workdir: Annotated[
        str | None, Field(max_length=4096, description="folder to run in (default: the server's)")
    ] = None,
    config: Annotated[
        dict[str, Any] | None,
        Field(description="the job's config; it receives it as JSON in $AIR_CONFIG_FILE"),
    ] = None,
    gpus: Annotated[int, Field(ge=0, le=1024, description="GPUs the job needs")] = 0,
    cpus: Annotated[
        int | None, Field(ge=1, le=1024, description="thread cap (default: a fair share)")
    ] = None,
    priority: Literal["low", "normal", "high"] = "normal",
    preemptible: Annotated[
        bool, Field(description="may be stopped and requeued for higher-priority jobs")
    ] = False,
    timeout_min: Annotated[
        float | None, Field(gt=0, description="stop the job after this many minutes")
    ] = None,
    max_retries: Annotated[int, Field(ge=0, le=100, description="retries after a failure")] = 0,
    env: Annotated[
        dict[str, Annotated[str, Field(max_length=100_000)]] | None,
        Field(description="extra environment variables"),
    ] = None,
    experiment: Annotated[
        str | None, Field(max_length=500, description="MLflow experiment (created if missing)")
    ] = None,
    tags: Annotated[dict[str, ShortText] | None, Field(description="MLflow run tags")] = None,
    idempotency_key: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            description="makes retries safe: a second launch with the same key returns the"
            " first job instead of starting another",
        ),
    ] = None,
    project: Annotated[
        str | None, Field(max_length=64, description="project, for GPU quotas")
    ] = None,
    backend: Annotated[
        Literal["local", "ray"] | None,
        Field(description="where to run: local, or a Ray cluster (default: AIR_HOME's setting)"),
    ] = None,
    data: Annotated[
        list[DataInput] | None,
        Field(max_length=100, description="data inputs, seen by the job under $AIR_DATA_DIR/name"),
    ] = None,
    track: Annotated[bool, Field(description="create an MLflow run for the job")] = True,
    code: Annotated[
        Literal["snapshot", "live"],
        Field(
            description="snapshot: the job runs a private copy of the code as it is now (edits"
            " after launch do not reach it); live: it runs in workdir itself"
        ),
    ] = "snapshot",
    patch: Annotated[
        str | None,
        Field(
            max_length=4_000_000,
            description="a unified diff (git diff from the repository root) applied to the"
            " job's snapshot only, never to the tree: run code variants without editing files",
        ),
    ] = None,
    dry_run: Annotated[
        bool, Field(description="validate and say what would happen; launch nothing")
    ] = False,
) -> JobReply:
    """Launch a training job (queued, started as soon as its GPUs are free); returns its info.

    Use dry_run=true first to check a spec. Pass an idempotency_key so that a retried call
    cannot start the job twice (with a key this call is idempotent). Then follow the job with
    wait_for_jobs or get_job, and read get_logs / get_metrics.
    """
    if config is not None and len(json.dumps(config, default=str)) > MAX_CONFIG_BYTES:
        raise InvalidInput(
            f"config is larger than {MAX_CONFIG_BYTES // 1000} KB",
            hint="pass large inputs as files (data) and keep config to hyperparameters",
        )
    given = {
        "command": command,
        "name": name,
        "workdir": workdir,
        "config": config,
        "gpus": gpus,
        "cpus": cpus,
        "priority": priority,
        "preemptible": preemptible,
        "timeout_min": timeout_min,
        "max_retries": max_retries,
        "env": env,
        "experiment": experiment,
        "tags": tags,
        "idempotency_key": idempotency_key,
        "project": project,
        "backend": backend,
        "data": [d.model_dump(exclude_none=True) for d in data] if data else None,
        "track": track,
        "code": code,
        "patch": patch,
    }
    spec = {k: v for k, v in given.items() if v is not None}
    return _reply(client, client.launch(spec, dry_run=dry_run))


def get_job(client: Client, job_id: JobId) -> JobReply:
    """Where a job stands: status, why (message, failure_kind), GPUs, attempts, MLflow run.

    A FAILED or TIMED_OUT job is a normal answer, not an error: the reply says why and carries
    the last lines of its log.
    """
    try:
        return _reply(client, client.get(job_id))
    except NotFound as exc:
        raise job_not_found(exc) from None


def list_jobs(
    client: Client,
    status: Annotated[StatusName | None, Field(description="only jobs in this status")] = None,
    experiment: Annotated[
        str | None, Field(max_length=500, description="only jobs of this MLflow experiment")
    ] = None,
    limit: Annotated[int, Field(ge=1, le=100, description="jobs per page")] = 20,
    cursor: Annotated[
        str | None, Field(max_length=40, description="next_cursor from the previous page")
    ] = None,
) -> JobPage:
    """List jobs, newest first, as short summaries (id, name, status); page with cursor.

    Call get_job for the details of one.
    """
    # The client's own check (str.isdigit) lets "²" and 40-digit numbers through to int() and
    # SQLite: a cursor is what next_cursor gave, a row number of at most 18 ASCII digits.
    if cursor is not None and not CURSOR_RE.fullmatch(cursor):
        raise InvalidInput(
            f"bad cursor {cursor[:40]!r}: not a next_cursor from list_jobs",
            hint="pass next_cursor exactly as the previous page gave it, or no cursor",
        )
    page = client.list(status=status, experiment=experiment, limit=limit, cursor=cursor)
    return JobPage(
        items=[
            JobSummary(
                job_id=j.job_id,
                name=j.name if len(j.name) <= 60 else j.name[:57] + "...",
                status=j.status.value,
                failure_kind=j.failure_kind,
            )
            for j in page.items
        ],
        next_cursor=page.next_cursor,
    )


def get_metrics(
    client: Client,
    job_id: JobId,
    keys: Annotated[
        list[Annotated[str, Field(max_length=250)]] | None,
        Field(max_length=50, description="metric keys (default: all)"),
    ] = None,
    history: Annotated[
        bool, Field(description="also return each key's history as [step, value] pairs")
    ] = False,
    max_points: Annotated[
        int, Field(ge=2, le=1000, description="most points per history (downsampled)")
    ] = 50,
) -> MetricsReply:
    """A job's MLflow metrics: the latest value of each key, and optionally a downsampled history.

    Works while the job runs. An unknown key is refused with the keys the run did log.
    """
    try:
        metrics = client.metrics(job_id, keys=keys, history=history, max_points=max_points)
    except NotFound as exc:
        if exc.context.get("job_id") and "MLflow run" not in exc.message:
            raise job_not_found(exc) from None
        exc.hint = f"read its printed summary with get_logs (job_id={job_id})"
        raise
    latest = metrics.latest if not keys else {k: metrics.latest[k] for k in keys}
    return MetricsReply(
        job_id=metrics.job_id, run_id=metrics.run_id, latest=latest, history=metrics.history
    )


def compare_jobs(
    client: Client,
    job_ids: Annotated[list[JobId], Field(min_length=2, max_length=20, description="job ids")],
    metric: Annotated[
        str | None,
        Field(max_length=250, description="metric to compare (latest, best, step); default all"),
    ] = None,
) -> CompareReply:
    """Compare jobs side by side: each one's config diff against the first job, and a metric.

    Use it to see which change helped. Without metric, the latest value of every metric.
    """
    try:
        rows = client.compare(list(job_ids), metric=metric)
    except NotFound as exc:
        raise job_not_found(exc) from None
    return CompareReply(metric=metric, rows=[CompareRow(**r) for r in rows])


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


def wait_is_over(infos: list[JobInfo], mode: str) -> bool:
    """Whether any (mode "any") or all of the jobs have ended."""
    ended = [i.status.is_terminal() for i in infos]
    return any(ended) if mode == "any" else all(ended)


def wait_check(client: Client, ids: list[str], mode: str) -> list[JobInfo]:
    """One look at the jobs (no waiting): their infos; an unknown id is refused."""
    try:
        return client.wait(ids, timeout_s=0, any=(mode == "any"))
    except NotFound as exc:
        raise job_not_found(exc) from None


def wait_reply(client: Client, infos: list[JobInfo], mode: str) -> WaitReply:
    done = wait_is_over(infos, mode)
    return WaitReply(done=done, timed_out=not done, jobs=[_reply(client, i) for i in infos])


def wait_for_jobs(
    client: Client,
    job_ids: JobIds,
    timeout_s: Annotated[
        float,
        Field(ge=0, le=MAX_WAIT_S, description="seconds to wait at most; call again to go on"),
    ] = 30.0,
    mode: Annotated[
        Literal["any", "all"], Field(description="return when any job ends, or when all have")
    ] = "any",
    on_progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
) -> WaitReply:
    """Wait until any (or all) of the jobs end, up to timeout_s; returns their infos.

    Sends progress notifications (jobs ended / total) while it waits. On timeout it returns
    normally with timed_out=true: call it again to keep waiting.
    """
    # (on_progress gets (ended, total, message) when a status changes, and every few seconds;
    # setting `stop` ends the wait with WaitAborted: the caller went away. The MCP server runs
    # the async twin in mcp_server.waiting instead, which holds no thread while it waits.)
    ids = list(dict.fromkeys(job_ids))
    tracker = WaitProgress(len(ids))

    def progress(infos: list[JobInfo]) -> None:
        if stop is not None and stop.is_set():
            raise WaitAborted()
        if on_progress is None:
            return
        update = tracker.update(infos)
        if update is not None:
            on_progress(*update)

    try:
        infos = client.wait(ids, timeout_s=timeout_s, any=(mode == "any"), on_progress=progress)
    except NotFound as exc:
        raise job_not_found(exc) from None
    return wait_reply(client, infos, mode)


def cancel_job(
    client: Client,
    job_id: JobId,
    reason: Annotated[str | None, Field(max_length=500, description="why, for the record")] = None,
) -> JobReply:
    """Cancel a queued or running job (SIGTERM, then SIGKILL after a grace period).

    Idempotent: cancelling a job that is already CANCELLED returns it unchanged. A job that
    already ended otherwise (SUCCEEDED, FAILED, TIMED_OUT) cannot be cancelled: an error says so.
    """
    try:
        return _reply(client, client.cancel(job_id, reason=reason))
    except NotFound as exc:
        raise job_not_found(exc) from None
    except InvalidState as exc:
        info = client.get(job_id)
        if info.status == JobStatus.CANCELLED:
            return _reply(client, info)
        exc.hint = f"nothing to do; read the job with get_job (job_id={job_id})"
        raise


def list_gpus(client: Client) -> GpuList:
    """The GPUs of this machine: index, name, memory, health, cordon and reason, jobs on each."""
    return GpuList(gpus=client.gpus())
