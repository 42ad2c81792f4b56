"""Who may call ``air-mcp`` over HTTP: the bearer token file and the loopback peer-uid check.

Loopback is not single-user: any local account can connect to 127.0.0.1. So the HTTP transport
always requires a bearer token (a generated one, kept owner-only in AIR_HOME, when
AIR_MCP_TOKEN is not set), and on Linux it also checks which uid owns the connecting socket.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import stat
from pathlib import Path

TOKEN_FILE = "mcp-token"


def token_file(home: Path) -> Path:
    """Where the generated token lives: AIR_HOME/mcp-token (mode 0600)."""
    return home / TOKEN_FILE


def load_or_create_token(home: Path) -> Path:
    """The owner-only token file in ``home``, created with a fresh token when missing or unsafe.

    A file another user could read (or that is not ours, or not a plain file) is replaced: its
    token may be known to someone else. Returns the path; the token is read with ``read_token``.
    """
    path = token_file(home)
    home.mkdir(parents=True, exist_ok=True)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None:
        safe = (
            stat.S_ISREG(info.st_mode)
            and info.st_uid == os.geteuid()
            and not info.st_mode & 0o077
            and read_token(path)
        )
        if safe:
            return path
        path.unlink()
    tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.tmp")
    # O_EXCL + 0600 at creation: the token is never readable by others, not even for a moment.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (secrets.token_urlsafe(32) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def read_token(path: Path) -> str:
    """The token in ``path`` (stripped); '' when it is empty."""
    return path.read_text(encoding="utf-8").strip()


# --- the peer's uid on a loopback TCP connection (Linux) -------------------------------------


def _proc_addr(host: str, port: int) -> tuple[str, str] | None:
    """(address, port) as /proc/net/tcp{,6} write them (hex, host byte order per 32-bit word)."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    packed = addr.packed
    words = [packed[i : i + 4][::-1] for i in range(0, len(packed), 4)]  # little-endian hosts
    return "".join(w.hex().upper() for w in words), f"{port:04X}"


def _table_for(host: str) -> str:
    return "/proc/net/tcp6" if ":" in host else "/proc/net/tcp"


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client end of a TCP connection to us, from /proc/net/tcp (Linux).

    SO_PEERCRED works on Unix sockets only; for TCP the kernel's socket table still records the
    owner of each end. An IPv4 caller of a dual-stack server (``::ffff:127.0.0.1``) is found
    in the IPv4 table (its own socket is IPv4), else as mapped in the IPv6 one. None when it
    cannot be told (another OS, a connection already gone).
    """
    if socket.htonl(1) == 1:  # big-endian: the table's byte order differs; not worth guessing
        return None
    forms = [(client, server)]
    if unmapped(client[0]) != client[0]:
        forms.insert(0, ((unmapped(client[0]), client[1]), (unmapped(server[0]), server[1])))
    for (chost, cport), (shost, sport) in forms:
        uid = _uid_in_table(chost, cport, shost, sport)
        if uid is not None:
            return uid
    return None


def _uid_in_table(chost: str, cport: int, shost: str, sport: int) -> int | None:
    local = _proc_addr(chost, cport)
    remote = _proc_addr(shost, sport)
    if local is None or remote is None:
        return None
    want_local, want_remote = f"{local[0]}:{local[1]}", f"{remote[0]}:{remote[1]}"
    try:
        with open(_table_for(chost), encoding="ascii") as table:
            next(table, None)
            for line in table:
                fields = line.split()
                if len(fields) > 7 and fields[1] == want_local and fields[2] == want_remote:
                    return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


def can_tell_peer_uid() -> bool:
    """Whether this kernel's socket tables name each end's uid (Linux, little-endian)."""
    return socket.htonl(1) != 1 and os.path.exists("/proc/net/tcp")


def unmapped(host: str) -> str:
    """``::ffff:127.0.0.1`` (an IPv4 client of a dual-stack socket) as ``127.0.0.1``."""
    try:
        addr = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    mapped = getattr(addr, "ipv4_mapped", None)
    return str(mapped) if mapped is not None else host


def uid_allowed(uid: int | None) -> bool:
    """Our own uid and root (which can read the token file anyway); unknown is refused."""
    return uid is not None and uid in (os.geteuid(), 0)
