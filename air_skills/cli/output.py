"""What the `air` commands print: JSON for agents, rich text for people, errors, progress.

Text that comes from a job (names, messages, commands, log lines, config values, error text)
is never read as rich markup: a name like ``[/x]`` would crash the table and ``[nan]`` would
vanish. It goes to rich as ``Text`` (``plain``) or printed with ``say``, markup off.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from air_skills import settings
from air_skills.cli.basics import client, emit_json  # noqa: F401  (re-exported for the commands)
from air_skills.errors import AirError, InvalidInput, StoreError, render_json, render_text

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
JsonOpt = typer.Option(False, "--json", help="print JSON for agents and scripts")

STATUS_STYLE = {
    "QUEUED": "yellow",
    "RUNNING": "cyan",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "magenta",
    "TIMED_OUT": "red",
}


def check_range(option: str, value: float | None, least: float, most: float | None = None) -> None:
    """A numeric option out of range (NaN included) is bad input: exit 2, through the renderer."""
    if value is None or (value >= least and (most is None or value <= most)):
        return
    span = f">= {least}" if most is None else f"from {least} to {most}"
    raise InvalidInput(f"{option} must be {span}, not {value}", hint=f"give {option} {span}")


def handle_errors(fn: Callable[..., Any], *, check_settings: bool = True) -> Callable[..., Any]:
    """Check the AIR_* settings, then run the command; an AirError prints through the one
    renderer (``[code] message`` + ``Next: hint`` on stderr, or JSON on stdout) and exits
    with its exit code (2 for bad input, else 1)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            try:
                if check_settings:
                    settings.check_all()
                return fn(*args, **kwargs)
            except (StoreError, OSError) as exc:
                full = disk_full(exc)
                if full is None:
                    raise
                raise full from exc
        except AirError as exc:
            if kwargs.get("as_json"):
                sys.stdout.write(render_json(exc) + "\n")
            else:
                # Plain text (no markup): messages hold paths and brackets.
                say(err, render_text(exc))
            raise typer.Exit(exc.exit_code) from None

    return wrapper


@contextmanager
def still_running_on_interrupt(job_ids: list[str]) -> Iterator[None]:
    """Ctrl-C in a follow or a wait stops this command, not the jobs: say so, and how to
    cancel them, then exit 130 (as `docker logs -f` and `kubectl logs -f` do)."""
    try:
        yield
    except KeyboardInterrupt:
        ids = " ".join(job_ids)
        one = len(job_ids) == 1
        err.print(
            f"\nstopped watching: {ids} {'is' if one else 'are'} not cancelled and still"
            f" {'runs' if one else 'run'} (or {'waits' if one else 'wait'} to start)."
            f" Next: `air cancel {ids}` to stop {'it' if one else 'them'},"
            f" `air status {job_ids[0]}` to look again",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130) from None


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


def handle_errors_diagnosing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``handle_errors`` for `air doctor`, which reports bad settings among its checks."""
    return handle_errors(fn, check_settings=False)


# What a terminal would obey rather than show (ESC sequences, C1, DEL, bidi reordering): text
# from the store (an older record's name, a message) shows them as \x1b escapes. Newlines and
# tabs stay. Log output (`air logs`) is the job's own bytes and is written as it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every terminal control character written as a visible escape."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def plain(value: Any, style: str = "") -> Text:
    """``value`` as rich ``Text``: shown as it is, never parsed for markup or emoji codes,
    its control characters escaped."""
    return Text(printable(str(value)), style=style)


def say(console: Console, *parts: Any) -> None:
    """Print a line holding job-derived text: no markup, no emoji codes, no highlighting, no
    control characters (escaped)."""
    shown = [
        printable(p)
        if isinstance(p, str)
        else Text(printable(p.plain))
        if isinstance(p, Text) and _CONTROL.search(p.plain)
        else p
        for p in parts
    ]
    console.print(*shown, markup=False, emoji=False, highlight=False)


def status_text(info: Any) -> Text:
    return plain(info.status.value, STATUS_STYLE.get(info.status.value, ""))


def info_line(info: Any) -> Text:
    gpus = ",".join(map(str, info.gpus)) or "-"
    return Text.assemble(f"{info.job_id}  ", status_text(info), f"  gpus={gpus}  {info.message}")


def print_info(info: Any) -> None:
    t = Table(show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    for key, value in info.model_dump(mode="json").items():
        if value in (None, [], ""):
            continue
        t.add_row(plain(key), status_text(info) if key == "status" else plain(value))
    out.print(t)


def sparkline(values: list[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    lo, hi = min(values), max(values)
    step = max(1, len(values) // 60)
    vals = values[::step]
    if hi == lo:
        return bars[0] * len(vals)
    return "".join(bars[int((v - lo) / (hi - lo) * (len(bars) - 1))] for v in vals)


@contextmanager
def wait_progress(total: int) -> Iterator[Callable[[list[Any]], None]]:
    """A progress bar on stderr for `air wait`; yields the callback that updates it."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]waiting"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} done"),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
        task = bar.add_task("wait", total=total)

        def progress(infos: list[Any]) -> None:
            bar.update(task, completed=sum(i.status.is_terminal() for i in infos))

        yield progress
