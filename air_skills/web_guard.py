"""The token guard of air's local web pages (the study page, ``air ui``'s MLflow UI).

Every request needs the page's token, on loopback too: a sandboxed job runs as the same user
and may share the host's loopback, so neither the address nor the peer's uid tells the user
from a job. The token comes as ``Authorization: Bearer TOKEN``, or once as ``?token=`` in the
URL the command printed; that reply sets an HttpOnly cookie named after the port (cookies do
not separate ports, so two pages on one host keep their own). A request that changes state
(any method but GET, HEAD and OPTIONS) must also come from the page itself: ``Origin`` and
``Sec-Fetch-Site`` are checked, and a cookie alone is not enough without one of them (a page on
another 127.0.0.1 port is same-site for the cookie, never same-origin).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Sequence
from http.cookies import CookieError, SimpleCookie
from typing import Any

LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
COOKIE_PREFIX = "air_token_"


def new_token() -> str:
    """A fresh page token (192 bits), made per server process and kept only in its memory."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cookie_name(port: int | None) -> str:
    return f"{COOKIE_PREFIX}{port or 0}"


class TokenGuard:
    """ASGI middleware: the Host check (loopback binds answer loopback names only, against DNS
    rebinding), the token on every request, and the same-origin check on state changes.

    ``tokens``: every token accepted (the first is the page's own); ``scope["state"]
    ["token_ok"]`` tells the app the request carried one. ``how_to``: the refusal's hint.
    """

    def __init__(
        self, app: Any, *, tokens: Sequence[str], bind_host: str, how_to: str = ""
    ) -> None:
        if not tokens or not all(tokens):
            raise ValueError("a TokenGuard needs at least one non-empty token")
        self.app = app
        self._tokens = [t.encode() for t in tokens]
        self.loopback = is_loopback(bind_host)
        self.how_to = how_to or "open the URL the command printed (it carries ?token=...)"

    def _match(self, given: str) -> bool:
        raw = given.strip().encode()
        return any(hmac.compare_digest(raw, t) for t in self._tokens)

    def check(self, headers: dict[str, str], query: str, port: int | None) -> str | None:
        """How the request carries a token: "bearer", "cookie", "query", or None."""
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._match(given):
            return "bearer"
        try:
            cookie = SimpleCookie(headers.get("cookie", ""))
        except CookieError:
            cookie = SimpleCookie()
        name = cookie_name(port)
        if name in cookie and self._match(cookie[name].value):
            return "cookie"
        for pair in query.split("&"):
            key, _, value = pair.partition("=")
            if key == "token" and value and self._match(value):
                return "query"
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host_header = headers.get("host", "")
        host = host_header.rsplit(":", 1)[0].strip("[]").lower()
        if self.loopback and host not in LOOPBACK_NAMES:
            await refuse(send, 421, "Host not allowed: open the page on 127.0.0.1")
            return
        port = (scope.get("server") or (None, None))[1]
        query = scope.get("query_string", b"").decode("latin-1")
        how = self.check(headers, query, port)
        scope.setdefault("state", {})["token_ok"] = how is not None
        if how is None:
            await refuse(send, 401, f"this page needs its token: {self.how_to}")
            return
        if scope.get("method", "GET").upper() not in SAFE_METHODS:
            why = cross_origin(headers, host_header, how)
            if why:
                await refuse(send, 403, why)
                return
        if how != "query":
            await self.app(scope, receive, send)
            return
        given = next(p.partition("=")[2] for p in query.split("&") if p.startswith("token="))
        cookie = f"{cookie_name(port)}={given}; HttpOnly; SameSite=Strict; Path=/"

        async def send_with_cookie(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def cross_origin(headers: dict[str, str], host_header: str, how: str) -> str | None:
    """Why a state-changing request is refused as cross-origin (None: it is not)."""
    origin = headers.get("origin")
    if origin is not None and origin.lower() not in (
        f"http://{host_header}".lower(),
        f"https://{host_header}".lower(),
    ):
        return f"a request from {origin} may not change anything here (cross-origin)"
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"a {site} request may not change anything here (Sec-Fetch-Site)"
    if how != "bearer" and origin is None and site is None:
        # a browser sends Origin on every POST: a cookie with neither may be forged
        return "a state change needs the page's own Origin, or Authorization: Bearer TOKEN"
    return None


async def refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": {"code": "forbidden", "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
