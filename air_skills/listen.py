"""A listening socket taken before any URL is printed: a busy port is an ``address-in-use``
error with its ``Next:``, never a URL announced and then raw uvicorn text (issue 38.8)."""

from __future__ import annotations

import errno
import socket

from air_skills.errors import InvalidState


def listen(host: str, port: int, what: str, other_port: int | None = None) -> socket.socket:
    """A socket bound to (host, port) and listening, for ``what`` (e.g. "the study page")."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        other = f", e.g. --port {other_port}" if other_port else ""
        raise InvalidState(
            f"cannot serve {what} on {host}:{port}: the address is in use (another server"
            " listens there)",
            code="address-in-use",
            hint=f"stop what listens on port {port} (`ss -ltnp | grep :{port}` names it), or"
            f" pass another --port{other}",
            port=port,
        ) from None
    return sock
