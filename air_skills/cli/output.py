"""What the `air` commands print: JSON for agents, rich text for people, errors, progress.

Text that comes from a job (names, messages, commands, log lines, config values, error text)
is never read as rich markup: a name like ``[/x]`` would crash the table and ``[nan]`` would
vanish. It goes to rich as ``Text`` (``plain``) or printed with ``say``, markup off.
"""

from __future__ import annotations

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
from air_skills.cli.basics import client, emit_json, full_disk_named  # noqa: F401  (re-exported for the commands)
from air_skills.cli.lines import CONTROL as _CONTROL
from air_skills.cli.lines import job_parts, printable
from air_skills.errors import AirError, InvalidInput, render_json, render_text

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
            with full_disk_named():
                if check_settings:
                    settings.check_all()
                return fn(*args, **kwargs)
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


def handle_errors_diagnosing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``handle_errors`` for `air doctor`, which reports bad settings among its checks."""
    return handle_errors(fn, check_settings=False)


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
    return job_line(*job_parts(info.job_id, info.status.value, info.gpus, info.message))


def job_line(before: str, status: str, after: str) -> Text:
    """A job's line from cli/lines.py's job_parts, its status coloured."""
    return Text.assemble(before, plain(status, STATUS_STYLE.get(status, "")), after)


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
