"""The study page's Starlette app: the page, the JSON API under /api/, and the token guard.

Read-only but for ``POST /api/studies/{key}/stop``, which needs the token on every address.
Beyond loopback every request needs it: ``Authorization: Bearer TOKEN``, or ``?token=`` once
(the reply then sets an HttpOnly cookie, so the page's own requests carry it).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from http.cookies import SimpleCookie
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from air_skills.errors import AirError, InvalidState, NotFound, render_json
from autoresearch.web.data import StudyIndex
from autoresearch.web.events import study_events
from autoresearch.web.gz import Replies
from autoresearch.web.page import page_html

COOKIE = "air_study_token"
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(data, default=str, separators=(",", ":"))
    return Response(body, status, headers=headers, media_type="application/json")


def _error(exc: AirError, status: int) -> Response:
    return Response(render_json(exc), status, media_type="application/json")


class TokenGuard:
    """Checks Host (loopback binds: loopback names only, against DNS rebinding) and the token."""

    def __init__(self, app: ASGIApp, *, token: str | None, bind_host: str) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self.reads_need_token = not is_loopback(bind_host)
        self.loopback = is_loopback(bind_host)

    def token_ok(self, headers: Headers, query: str) -> tuple[bool, bool]:
        """(the request carries the token, it came in the query string)."""
        if self._token is None:
            return False, False
        scheme, _, given = (headers.get("authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token):
            return True, False
        cookie = SimpleCookie(headers.get("cookie") or "")
        if COOKIE in cookie and hmac.compare_digest(cookie[COOKIE].value.encode(), self._token):
            return True, False
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            if name == "token" and hmac.compare_digest(value.encode(), self._token):
                return True, True
        return False, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = (headers.get("host") or "").rsplit(":", 1)[0].strip("[]").lower()
        if self.loopback and host not in LOOPBACK_NAMES:
            await _refuse(send, 421, "Host not allowed: open the page on 127.0.0.1")
            return
        ok, from_query = self.token_ok(headers, scope.get("query_string", b"").decode("latin-1"))
        scope.setdefault("state", {})["token_ok"] = ok
        if self.reads_need_token and not ok:
            await _refuse(
                send,
                401,
                "this page needs its token: open it with ?token=TOKEN"
                " (AIR_MCP_TOKEN of the server) or send Authorization: Bearer TOKEN",
            )
            return
        if not from_query or self._token is None:
            await self.app(scope, receive, send)
            return
        cookie = f"{COOKIE}={self._token.decode()}; HttpOnly; SameSite=Strict; Path=/"

        async def send_with_cookie(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
            await send(message)

        await self.app(scope, receive, send_with_cookie)


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": {"code": "forbidden", "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def build_app(index: StudyIndex, *, token: str | None = None, bind_host: str = "127.0.0.1"):
    """The ASGI app serving ``index``'s studies (``token``: the stop action's, and every
    request's beyond loopback)."""
    can_stop = token is not None
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

    async def stop(request: Request) -> Response:
        if not can_stop:
            exc = InvalidState(
                "this server was started without a token: stopping is off",
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
        Route("/api/studies/{key}/stop", stop, methods=["POST"]),
    ]
    return TokenGuard(Starlette(routes=routes), token=token, bind_host=bind_host)


def _missing(key: str) -> NotFound:
    return NotFound(
        f"no study {key!r} under the served folders",
        hint="GET /api/studies lists the studies this server sees",
    )
