"""The study page's Starlette app: the page, the JSON API under /api/, and the token guard.

Every request needs a token, on loopback too (``air_skills.web_guard``): the page's own,
made per server process and printed in its URL, or the owner's (AIR_MCP_TOKEN).
``Authorization: Bearer TOKEN``, or ``?token=`` once (the reply then sets an HttpOnly cookie,
so the page's own requests carry it). Read-only but for ``POST /api/studies/{key}/stop``: on
only where the owner's token exists, and refused from any other origin.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from air_skills.errors import AirError, InvalidState, NotFound, render_json
from air_skills.web_guard import TokenGuard
from autoresearch.web.data import StudyIndex
from autoresearch.web.events import study_events
from autoresearch.web.gz import Replies
from autoresearch.web.page import page_html


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(data, default=str, separators=(",", ":"))
    return Response(body, status, headers=headers, media_type="application/json")


def _error(exc: AirError, status: int) -> Response:
    return Response(render_json(exc), status, media_type="application/json")


def build_app(
    index: StudyIndex,
    *,
    tokens: Sequence[str],
    can_stop: bool = False,
    bind_host: str = "127.0.0.1",
):
    """The ASGI app serving ``index``'s studies to requests that carry one of ``tokens``
    (``can_stop``: the stop action is on)."""
    replies = Replies()  # made and gzipped once per version

    def page(request: Request) -> Response:
        # a study's page carries its view (a big study's first screen): the first paint needs
        # no second request (its live part may be a few seconds old: the event stream brings
        # the rest at once)
        key = request.path_params.get("key")
        parts = index.view_parts(key, clock_ok=True) if key else None
        config = {"mode": "live", "canStop": can_stop}
        if parts is None:
            return HTMLResponse(page_html(config))

        def make() -> bytes:
            assert parts is not None
            return page_html(config, initial=parts.first_screen().decode()).encode()

        return replies.reply(request, ("page", key, parts.version), make, "text/html")

    def studies(request: Request) -> Response:
        return _json({"studies": index.studies()})

    def study(request: Request) -> Response:
        key = request.path_params["key"]
        try:
            got = index.view_json(key)
        except AirError as exc:
            return _error(exc, 500)
        if got is None:
            return _error(_missing(key), 404)
        etag = f'"{got[0]}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"etag": etag})
        headers = {"etag": etag, "cache-control": "no-cache"}
        body = got[1]
        return replies.reply(request, ("view", key, got[0]), lambda: body, "application/json",
                             headers)  # fmt: skip

    def events(request: Request) -> Response:
        key = request.path_params["key"]
        if index.folder_of(key) is None:
            return _error(_missing(key), 404)
        stream = study_events(index, key, request.query_params.get("version"))
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        return StreamingResponse(stream, headers=headers, media_type="text/event-stream")

    def patch(request: Request) -> Response:
        key, n = request.path_params["key"], request.path_params["n"]
        got = index.patch(key, n)
        if got is None:
            return _error(
                NotFound(
                    f"no trial {n} in study {key!r}",
                    hint=f"GET /api/studies/{key} lists its trials",
                ),
                404,
            )
        return _json(got)

    def outputs(request: Request) -> Response:
        key, n = request.path_params["key"], request.path_params["n"]
        got = index.outputs(key, n)
        if got is None:
            hint = f"GET /api/studies/{key} lists its trials"
            return _error(NotFound(f"no trial {n} in study {key!r}", hint=hint), 404)
        return _json(got)

    async def stop(request: Request) -> Response:
        if not can_stop:
            exc = InvalidState(
                "this server was started without the owner's token: stopping is off",
                hint="restart `autoresearch serve` with AIR_MCP_TOKEN set",
            )
            return _error(exc, 403)
        if not request.scope["state"].get("token_ok"):
            exc = InvalidState(
                "stopping a study needs the token",
                hint="send Authorization: Bearer TOKEN (AIR_MCP_TOKEN)",
            )
            return _error(exc, 401)
        folder = index.folder_of(request.path_params["key"])
        if folder is None:
            return _error(_missing(request.path_params["key"]), 404)
        from autoresearch.api import stop_study

        try:
            out = await run_in_threadpool(stop_study, folder, reason="stopped from the study page")
        except AirError as exc:
            return _error(exc, 409)
        return _json({"state": out["state"], "stop_reason": out.get("stop_reason")})

    routes = [
        Route("/", page),
        Route("/studies/{key}", page),
        Route("/api/studies", studies),
        Route("/api/studies/{key}", study),
        Route("/api/studies/{key}/events", events),
        Route("/api/studies/{key}/trials/{n:int}/patch", patch),
        Route("/api/studies/{key}/trials/{n:int}/outputs", outputs),
        Route("/api/studies/{key}/stop", stop, methods=["POST"]),
    ]
    how_to = "open the URL `autoresearch serve` printed (it carries ?token=...)"
    return TokenGuard(Starlette(routes=routes), tokens=tokens, bind_host=bind_host, how_to=how_to)


def _missing(key: str) -> NotFound:
    return NotFound(
        f"no study {key!r} under the served folders",
        hint="GET /api/studies lists the studies this server sees",
    )
