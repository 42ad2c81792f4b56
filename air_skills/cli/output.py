"""What the `air` commands print: JSON for agents, rich text for people, errors, progress.

Text that comes from a job (names, messages, commands, log lines, config values, error text)
is never read as rich markup: a name like ``[/x]`` would crash the table and ``[nan]`` would
vanish. It goes to rich as ``Text`` (``plain``) or printed with ``say``, markup off.
"""

from __future__ import annotations

import json
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
from air_skills.errors import AirError, render_json, render_text

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


def client() -> Any:
    """The Client, imported late: `air --help` and parsing errors stay fast."""
    from air_skills.client import Client

    return Client()


def _dump(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, list):
        return [_dump(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    return obj


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(_dump(obj), indent=1, default=str) + "\n")


def handle_errors(fn: Callable[..., Any], *, check_settings: bool = True) -> Callable[..., Any]:
    """Check the AIR_* settings, then run the command; an AirError prints through the one
    renderer (``[code] message`` + ``Next: hint`` on stderr, or JSON on stdout) and exits
    with its exit code (2 for bad input, else 1)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            if check_settings:
                settings.check_all()
            return fn(*args, **kwargs)
        except AirError as exc:
            if kwargs.get("as_json"):
                sys.stdout.write(render_json(exc) + "\n")
            else:
                # Plain text (no markup): messages hold paths and brackets.
                err.print(render_text(exc), highlight=False, markup=False)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


def handle_errors_diagnosing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``handle_errors`` for `air doctor`, which reports bad settings among its checks."""
    return handle_errors(fn, check_settings=False)


def plain(value: Any, style: str = "") -> Text:
    """``value`` as rich ``Text``: shown as it is, never parsed for markup or emoji codes."""
    return Text(str(value), style=style)


def say(console: Console, *parts: Any) -> None:
    """Print a line holding job-derived text: no markup, no emoji codes, no highlighting."""
    console.print(*parts, markup=False, emoji=False, highlight=False)


def status_text(info: Any) -> Text:
    return plain(info.status.value, STATUS_STYLE.get(info.status.value, ""))


def info_line(info: Any) -> Text:
    gpus = ",".join(map(str, info.gpus)) or "-"
    return Text.assemble(
        f"{info.job_id}  ", status_text(info), f"  gpus={gpus}  {info.message}"
    )


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
