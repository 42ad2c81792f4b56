"""What every `air` command shares without typer or rich: the Client it uses, its JSON output,
and a full disk named as the `disk-full` error.

cli/output.py re-exports both for the typer commands; the fast paths (cli/fast,
cli/fast/launch.py) import them from here, so the two give the same bytes.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from air_skills.errors import AirError, StoreError


def client() -> Any:
    """The Client, imported late: `air --help` and parsing errors stay fast."""
    from air_skills.client import Client

    client = Client()
    # A launch keeps MLflow out of this short-lived process: it claims a spare run, or its
    # supervisor makes the run (runtime/launch/launch_run.py).
    client.runtime.make_runs_here = False
    return client


def _dump(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, list):
        return [_dump(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    return obj


def emit_json(obj: Any) -> None:
    """``obj`` (models, lists and dicts of them) as indented JSON on stdout."""
    sys.stdout.write(json.dumps(_dump(obj), indent=1, default=str) + "\n")


@contextmanager
def full_disk_named() -> Iterator[None]:
    """A store or file error that is a full disk or quota becomes the ``disk-full`` error
    naming the path (disk_full); every other failure passes as it is."""
    try:
        yield
    except (StoreError, OSError) as exc:
        full = disk_full(exc)
        if full is None:
            raise
        raise full from exc


FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
NEARLY_FULL_BYTES = 1 << 20  # SQLite reports a full disk as a bare "disk I/O error"


def disk_full(exc: BaseException) -> AirError | None:
    """A ``disk-full`` error naming the path, when ``exc`` (or what caused it) is a full disk
    or quota; None for every other failure, which keeps its own message and hint."""
    paths: list[str] = []
    io_error = False
    chain: BaseException | None = exc
    for _ in range(8):  # the chain of causes is short; the bound guards a cycle
        if chain is None:
            break
        if isinstance(chain, OSError):
            if chain.filename:
                paths.append(os.fsdecode(chain.filename))
            if chain.errno in FULL_ERRNOS:
                return _full_error(paths[-1] if paths else _home_if_full(), chain.errno)
            io_error = io_error or chain.errno == errno.EIO
        if isinstance(chain, AirError) and chain.context.get("path"):
            paths.append(str(chain.context["path"]))
        sqlite_name = getattr(chain, "sqlite_errorname", "") or ""
        if sqlite_name == "SQLITE_FULL":
            return _full_error(paths[-1] if paths else "", errno.ENOSPC)
        io_error = io_error or sqlite_name.startswith("SQLITE_IOERR")
        chain = chain.__cause__ or chain.__context__
    # An I/O error says nothing more: the free space on its disk tells whether it was full.
    for path in paths if io_error else []:
        free = _free_bytes(path)
        if free is not None and free < NEARLY_FULL_BYTES:
            return _full_error(path, errno.ENOSPC, free)
    return None


def _home_if_full() -> str:
    """AIR_HOME when its disk is (nearly) full: where a write without a file name most
    likely failed (a file's close reports no name); else "" (unknown)."""
    from air_skills.home import default_home

    home = str(default_home())
    free = _free_bytes(home)
    return home if free is not None and free < NEARLY_FULL_BYTES else ""


def _free_bytes(path: str) -> int | None:
    """Bytes this user may still write on the disk holding ``path`` (None: unknown)."""
    probe = os.path.abspath(path)
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe) if probe != "/" else ""
    try:
        st = os.statvfs(probe or "/")
    except OSError:
        return None
    return 0 if st.f_favail == 0 and st.f_files else st.f_bavail * st.f_frsize


def _full_error(path: str, code: int, free: int | None = None) -> AirError:
    what = "the disk quota is exceeded" if code == errno.EDQUOT else "the disk is full"
    is_dir = bool(path) and os.path.isdir(path)
    where = f" writing {'under ' if is_dir else ''}{path}" if path else " (no space left)"
    left = f" ({free // 1024} KiB free)" if free is not None else ""
    folder = (path if is_dir else os.path.dirname(path)) if path else "AIR_HOME"
    return AirError(
        f"{what}{where}{left}",
        code="disk-full",
        hint=f"free space on the disk holding {folder} (`df -h` shows it), or set"
        " AIR_HOME to a folder on another disk, then retry",
        path=path or None,
    )
