"""The streamable HTTP transport of ``air-mcp``: the SDK's app on uvicorn, behind a guard.

``HttpGuard`` checks Host (421), Origin (403), bearer token (401), the loopback peer's uid (403)
and size (413): a plain ASGI middleware in front of the SDK's app. It never logs or echoes a
header value, so the token cannot leak through a log line or a reply. Sessions are capped in
number and expire when idle (the SDK's manager enforces both: 503 beyond the cap, 404 after).
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import json
import socket
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_server.auth import can_tell_peer_uid, peer_uid, uid_allowed, unmapped

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")
DEFAULT_MAX_BODY_BYTES = 1_000_000
# An idle session costs ~37 KB; an agent keeps one or two open. The SDK's defaults (10,000
# sessions, 30 minutes idle) let a local caller grow the server by hundreds of MB.
DEFAULT_MAX_SESSIONS = 64
DEFAULT_SESSION_IDLE_S = 300.0


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(unmapped(host.strip("[]"))).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, int | None]:
    """'host:port' / '[v6]:port' / 'host' -> (host, port); host lowercased, v6 without brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        host, port = value, ""
    if port and not port.isdigit():
        return host, -1
    return host, int(port) if port else None


class HttpGuard:
    """Checks every HTTP request before the MCP app sees it (lifespan events pass through)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        port: int,
        token: str,
        bind_host: str = "127.0.0.1",
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        identify: Callable[[str], Any] | None = None,
    ) -> None:
        self.app = app
        # An identity's token (``air mcp-token add``) -> who calls, or None for any other.
        self.identify = identify
        self.port = port
        if not token:
            raise ValueError("HttpGuard needs a token: HTTP is never served without one")
        self._token = token.encode()
        names = {"127.0.0.1", "localhost", "::1"}
        if not is_loopback(bind_host) and bind_host not in ("0.0.0.0", "::"):
            names.add(bind_host.strip("[]").lower())
        names.update(h.strip("[]").lower() for h in allowed_hosts)
        self.host_names = names
        self.allowed_origins = {o.rstrip("/").lower() for o in allowed_origins}
        self.max_body_bytes = max_body_bytes

    def host_ok(self, value: str | None) -> bool:
        if not value:
            return False
        host, port = _split_host(value)
        return host in self.host_names and port in (None, self.port)

    def origin_ok(self, value: str) -> bool:
        """Loopback origins (any port) and the ones allowed by name; 'null' is refused."""
        origin = value.rstrip("/").lower()
        if origin in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and is_loopback(parts.hostname or "")

    def token_ok(self, value: str | None) -> bool:
        if not value:
            return False
        scheme, _, given = value.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self._token)

    def identity_of(self, value: str | None) -> Any:
        """The identity whose token the Authorization header carries (None: no identity's)."""
        if self.identify is None or not value:
            return None
        scheme, _, given = value.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return None
        return self.identify(given.strip())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not self.host_ok(headers.get("host")):
            await _refuse(
                send, 421, "Host not allowed: use a loopback address or --allow-host NAME"
            )
            return
        origin = headers.get("origin")
        if origin is not None and not self.origin_ok(origin):
            await _refuse(send, 403, "Origin not allowed: start air-mcp with --allow-origin ORIGIN")
            return
        identity = None
        if not self.token_ok(headers.get("authorization")):
            identity = self.identity_of(headers.get("authorization"))
        if identity is None and not self.token_ok(headers.get("authorization")):
            challenge = 'Bearer realm="air-mcp"'
            if headers.get("authorization"):
                challenge += ', error="invalid_token"'
            await _refuse(
                send,
                401,
                "missing or wrong bearer token: send Authorization: Bearer TOKEN (AIR_MCP_TOKEN,"
                " or the server's AIR_HOME/mcp-token; `air mcp-config` writes it for you)",
                [(b"www-authenticate", challenge.encode())],
            )
            return
        # An identity's token is its own check (agents may run as other users or elsewhere);
        # the server's own token is the local user's, so its loopback callers must be us.
        refusal = _peer_refusal(scope) if identity is None else None
        if identity is not None:
            scope.setdefault("state", {})["air_identity"] = identity
        if refusal:
            await _refuse(send, 403, refusal)
            return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await _refuse(send, 413, f"request body larger than {self.max_body_bytes} bytes")
            return
        await self.app(scope, receive, send)


def _peer_refusal(scope: Scope) -> str | None:
    """Why a loopback caller is refused (another uid, or one the kernel's table does not
    name); None for our own uid, root, a remote caller (the token is its check) or an OS whose
    tables cannot tell. IPv4 callers of a dual-stack server (``::ffff:127.0.0.1``) included."""
    client, server = scope.get("client"), scope.get("server")
    if not client or not server or server[1] is None or not is_loopback(client[0]):
        return None
    if not can_tell_peer_uid():
        return None
    uid = peer_uid((client[0], client[1]), (server[0], server[1]))
    if uid is None:
        return "connection from a local process whose uid the kernel does not name: refused"
    if not uid_allowed(uid):
        return f"connection from another local user (uid {uid}) refused"
    return None


async def _refuse(
    send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve_http(
    server: MCPServer,
    *,
    host: str,
    port: int,
    token: str,
    token_source: str,
    allowed_hosts: list[str],
    allowed_origins: list[str],
    max_body_bytes: int,
    log_level: str,
    say: Callable[[str], None],
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_idle_s: float = DEFAULT_SESSION_IDLE_S,
    identify: Callable[[str], Any] | None = None,
) -> None:
    """Serve ``server`` at http://host:port/mcp until interrupted; ``say`` announces the URL.

    ``token_source`` says where the token is (never the token itself: it must not reach a log).
    """
    import uvicorn

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it: without it, Nagle and delayed ACKs add ~40 ms per call.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        from air_skills.listen import listen

        listen(host.strip("[]"), port, "air-mcp over HTTP", other_port=port + 1)  # the error
        raise
    sock.listen(128)
    port = sock.getsockname()[1]
    hosts = [f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]", *allowed_hosts)]
    if not is_loopback(host):
        hosts.append(f"{host}:{port}")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[
            "http://127.0.0.1:*",
            "http://localhost:*",
            "http://[::1]:*",
            "https://127.0.0.1:*",
            "https://localhost:*",
            "https://[::1]:*",
            "http://127.0.0.1",
            "http://localhost",
            "http://[::1]",
            *allowed_origins,
        ],
    )
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        max_request_body_size=max_body_bytes,
        transport_security=security,
        host=host,
        max_sessions=max_sessions,
        session_idle_timeout=session_idle_s,
    )
    guarded = HttpGuard(
        app,
        port=port,
        token=token,
        bind_host=host,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        max_body_bytes=max_body_bytes,
        identify=identify,
    )
    auth = f"bearer token required: {token_source}"
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    say(f"listening on http://{shown}:{port}/mcp ({auth})")
    config = uvicorn.Config(guarded, log_level=log_level.lower(), access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
