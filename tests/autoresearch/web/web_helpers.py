"""Start ``autoresearch serve`` as its own process for a test, and read its API over HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers import free_port, wait_until


def http(url: str, *, method: str = "GET", headers: dict[str, str] | None = None):
    """(status, headers, body) of one request; an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get_json(url: str, headers: dict[str, str] | None = None):
    status, _, body = http(url, headers=headers)
    return status, json.loads(body) if body else None


@contextmanager
def serving(
    *dirs: Path, host: str = "127.0.0.1", env: dict[str, str] | None = None
) -> Iterator[str]:
    """``autoresearch serve DIRS`` on a free port; yields its base URL (loopback address)."""
    port = free_port()
    cmd = [sys.executable, "-m", "autoresearch.cli", "serve", *map(str, dirs),
           "--host", host, "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, **(env or {})})  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"serve exited: {proc.stdout.read().decode() if proc.stdout else ''}"
            )
        try:
            return http(base + "/api/studies")[0] in (200, 401)
        except OSError:
            return False

    try:
        wait_until(up, timeout_s=60)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
