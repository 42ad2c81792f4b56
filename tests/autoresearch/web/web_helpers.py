"""Start ``autoresearch serve`` as its own process for a test, and read its API over HTTP."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers import free_port, wait_until

TOKENS: dict[str, str] = {}  # base URL of a page `serving` started -> the token it printed
PIDS: dict[str, int] = {}  # base URL -> the server's pid


def token_of(url: str) -> str | None:
    return next((t for base, t in TOKENS.items() if url.startswith(base)), None)


def with_token(url: str) -> str:
    """``url`` with the page's token as ``?token=`` (what a person opens from the printout)."""
    token = token_of(url)
    return f"{url}{'&' if '?' in url else '?'}token={token}" if token else url


def http(
    url: str, *, method: str = "GET", headers: dict[str, str] | None = None, auth: bool = True
):
    """(status, headers, body) of one request; an HTTP error status is returned, not raised.
    ``auth``: a page `serving` started gets its token as a bearer, unless headers say one."""
    headers = dict(headers or {})
    token = token_of(url) if auth else None
    if token and not any(k.lower() in ("authorization", "cookie") for k in headers):
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get_json(url: str, headers: dict[str, str] | None = None, auth: bool = True):
    status, _, body = http(url, headers=headers, auth=auth)
    return status, json.loads(body) if body else None


@contextmanager
def serving(
    *dirs: Path, host: str = "127.0.0.1", env: dict[str, str] | None = None
) -> Iterator[str]:
    """``autoresearch serve DIRS`` on a free port; yields its base URL (loopback address),
    whose token (from the printed URL) ``http`` and ``with_token`` then use."""
    port = free_port()
    cmd = [sys.executable, "-m", "autoresearch.cli", "serve", *map(str, dirs),
           "--host", host, "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, **(env or {})})  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode(errors="replace"))

    threading.Thread(target=pump, daemon=True).start()

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited: {''.join(lines)}")
        found = re.search(r"study page: \S+\?token=(\S+)", "".join(lines))
        if not found:
            return False
        TOKENS[base], PIDS[base] = found.group(1), proc.pid
        try:
            return http(base + "/api/studies")[0] == 200
        except OSError:
            return False

    try:
        wait_until(up, timeout_s=60)
        yield base
    finally:
        TOKENS.pop(base, None)
        PIDS.pop(base, None)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
