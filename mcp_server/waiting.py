"""wait_for_jobs and wait_for_study as async MCP tools: they sleep on the event loop, not on a
worker thread.

The SDK runs every synchronous tool on anyio's shared pool of 40 threads. A wait that blocked
one of them for minutes let 40 legitimate waits starve every other tool (cancel_job included).
Here a wait holds no thread between looks: each look is a short synchronous check on a small
pool of its own, and the wait sleeps with ``anyio.sleep`` in between. A session may have at
most ``MAX_WAITS_PER_SESSION`` waits at once (the server ``MAX_WAITS_IN_ALL``); beyond that a
call gets ``[too-many-waits]``.
"""

from __future__ import annotations

import inspect
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations

from air_skills.client import Client
from air_skills.errors import AirError
from mcp_server import tools
from mcp_server.adapter import describe, error_result, forbid_extra, ok_result
from mcp_server.render import render_reply, render_wait
from mcp_server.schemas import StudyReply, WaitReply
from mcp_server.tools.studies import (
    STUDY_POLL_S,
    parse_cursor,
    study_look,
    study_moved,
    study_waited,
)
from mcp_server.tools.wait import WaitProgress, batch_ids, wait_check, wait_is_over, wait_reply

MAX_WAITS_PER_SESSION = 64
MAX_WAITS_IN_ALL = 256
CHECK_THREADS = 4  # looks at the store run here, so waits never take the shared pool
FIRST_DELAY_S = 0.02
MAX_DELAY_S = 0.5

Report = Callable[[int, int, str], Awaitable[None]]


async def wait_async(
    client: Client,
    job_ids: list[str],
    timeout_s: float,
    mode: str,
    report: Report | None,
    limiter: anyio.CapacityLimiter,
    metric: str | None = None,
    direction: str = "minimize",
    group_by: str | None = None,
) -> WaitReply:
    """Wait until any (or all) of the jobs end, up to ``timeout_s``, without holding a thread."""
    ids = await anyio.to_thread.run_sync(batch_ids, client, list(job_ids), limiter=limiter)
    tracker = WaitProgress(len(ids))
    since = time.time()  # a job that stalls after this ends a wait in mode any
    deadline = time.monotonic() + timeout_s
    delay = FIRST_DELAY_S
    while True:
        infos, stalled = await anyio.to_thread.run_sync(
            wait_check, client, ids, mode, since, limiter=limiter
        )
        update = tracker.update(infos)
        if report is not None and update is not None:
            await report(*update)
        left = deadline - time.monotonic()
        if wait_is_over(infos, mode) or stalled or left <= 0:
            break
        await anyio.sleep(min(delay, left))
        delay = min(delay * 1.5, MAX_DELAY_S)
    return await anyio.to_thread.run_sync(
        wait_reply,
        client,
        infos,
        mode,
        metric,
        direction,
        group_by,
        stalled or None,
        limiter=limiter,
    )


class WaitSlots:
    """Counts the waits in progress, per session and in all; refuses one beyond either cap."""

    def __init__(
        self, cap: int | None = None, total: int | None = None, tool: str = "wait_for_jobs"
    ) -> None:
        self.tool = tool
        self.cap = cap or MAX_WAITS_PER_SESSION
        self.total = total or MAX_WAITS_IN_ALL
        self._held: Counter[str | None] = Counter()

    @contextmanager
    def take(self, key: str | None) -> Iterator[None]:
        """Hold a slot of session ``key`` for the wait; a key lives only while it holds one."""
        if self._held[key] >= self.cap or sum(self._held.values()) >= self.total:
            held = self._held[key] if self._held[key] >= self.cap else sum(self._held.values())
            raise AirError(
                f"{held} {self.tool} calls are already in progress"
                + (" in this session" if self._held[key] >= self.cap else " on this server"),
                code="too-many-waits",
                hint="wait for several jobs in one call (job_ids takes up to 100), or let a"
                " wait end first",
            )
        self._held[key] += 1
        try:
            yield
        finally:
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]


def _session_key(ctx: Context) -> str | None:
    """The MCP session a call came on (its id), or None for calls that have no session."""
    # The SDK builds a ServerSession per request; the connection behind it carries the
    # session id of a stateful HTTP or stdio session. Requests of the newer single-exchange
    # protocol have none: they share one key, so the cap still bounds them together.
    connection = getattr(ctx.session, "_connection", None)
    return getattr(connection, "session_id", None)


def wait_tool(client: Client, annotations: ToolAnnotations) -> Tool:
    """wait_for_jobs as a Tool: the schema of ``tools.wait_for_jobs``, progress as notifications."""
    sig = inspect.signature(tools.wait_for_jobs, eval_str=True)
    params = [p for n, p in sig.parameters.items() if n not in ("client", "on_progress", "stop")]

    async def wait(ctx: Context, limiter: anyio.CapacityLimiter, kwargs: dict[str, Any]) -> Any:
        return await wait_async(
            client,
            kwargs["job_ids"],
            kwargs.get("timeout_s", sig.parameters["timeout_s"].default),
            kwargs.get("mode", sig.parameters["mode"].default),
            ctx.report_progress,
            limiter,
            kwargs.get("metric"),
            kwargs.get("direction", "minimize"),
            kwargs.get("group_by"),
        )

    call = _slotted(WaitSlots(), wait, render_wait)
    return _async_tool(
        call, sig, params, WaitReply, tools.wait_for_jobs, "Wait for jobs", annotations
    )


async def wait_study_async(
    study: str, timeout_s: float, limiter: anyio.CapacityLimiter, since: str | None = None
) -> StudyReply:
    """Wait until a trial of the study ends or the study stops, without holding a thread;
    with ``since`` (a reply's cursor), what changed since that reply."""
    seen = parse_cursor(since)
    first = now = await anyio.to_thread.run_sync(study_look, study, limiter=limiter)
    deadline = time.monotonic() + timeout_s
    while not study_moved(first, now, seen):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        await anyio.sleep(min(STUDY_POLL_S, left))
        now = await anyio.to_thread.run_sync(study_look, study, limiter=limiter)
    return study_waited(first, now, seen)


def study_wait_tool(client: Client, annotations: ToolAnnotations) -> Tool:
    """wait_for_study as a Tool: the schema of ``tools.wait_for_study``, a slot per wait."""
    sig = inspect.signature(tools.wait_for_study, eval_str=True)
    params = [p for n, p in sig.parameters.items() if n != "client"]

    async def wait(ctx: Context, limiter: anyio.CapacityLimiter, kwargs: dict[str, Any]) -> Any:
        timeout_s = kwargs.get("timeout_s", sig.parameters["timeout_s"].default)
        return await wait_study_async(kwargs["study"], timeout_s, limiter, kwargs.get("since"))

    call = _slotted(
        WaitSlots(tool="wait_for_study"), wait, lambda r: render_reply("wait_for_study", r)
    )
    return _async_tool(
        call, sig, params, StudyReply, tools.wait_for_study, "Wait for a study", annotations
    )


Wait = Callable[[Context, anyio.CapacityLimiter, dict[str, Any]], Awaitable[Any]]


def _slotted(
    slots: WaitSlots, wait: Wait, render: Callable[[Any], str]
) -> Callable[..., Awaitable[CallToolResult]]:
    """A wait tool's call: ``wait`` in one of ``slots``, its looks on a small pool of threads
    of its own; its reply rendered, or an AirError as the tool's error."""
    pool: list[anyio.CapacityLimiter] = []  # made on first use: a limiter needs an event loop

    async def call(ctx: Context, **kwargs: Any) -> CallToolResult:
        if not pool:
            pool.append(anyio.CapacityLimiter(CHECK_THREADS))
        try:
            with slots.take(_session_key(ctx)):
                reply = await wait(ctx, pool[0], kwargs)
        except AirError as exc:
            return error_result(exc)
        return ok_result(reply, render(reply))

    return call


def _async_tool(
    call: Callable[..., Awaitable[CallToolResult]],
    sig: inspect.Signature,
    params: list[inspect.Parameter],
    reply: type,
    plain: Callable[..., Any],
    title: str,
    annotations: ToolAnnotations,
) -> Tool:
    """``call`` registered as the tool of the plain function ``plain``: its parameters (and
    the MCP context), its name and description, ``reply`` as the structured output."""
    ctx_param = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    call.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[*params, ctx_param], return_annotation=Annotated[CallToolResult, reply]
    )
    call.__name__ = plain.__name__
    tool = Tool.from_function(
        call,
        name=plain.__name__,
        title=title,
        description=describe(plain),
        annotations=annotations,
    )
    return forbid_extra(tool)
