"""`air` result commands: a job's output (logs, --follow, --rank), its metrics, comparisons."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from air_skills.cli.output import (
    JsonOpt,
    check_range,
    client,
    emit_json,
    err,
    handle_errors,
    info_line,
    out,
    plain,
    say,
    sparkline,
    still_running_on_interrupt,
)
from air_skills.runtime.execution.gang import filter_rank


@handle_errors
def logs(
    job: str = typer.Argument(...),
    tail: int = typer.Option(100, "--tail", help="the last N lines (0: all)"),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="stream new output until the job ends (Ctrl-C: stop)"
    ),
    rank: Optional[int] = typer.Option(None, "--rank", help="only this rank's lines (a gang)"),
    grep: Optional[str] = typer.Option(
        None, "--grep", help="only lines matching this RE2 regular expression (LINE:text)"
    ),
    last_match: bool = typer.Option(False, "--last-match", help="--grep: the last matches"),
    offset: Optional[int] = typer.Option(
        None, "--offset", help="from this byte on (where a stopped --grep says to go on)"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Print a job's output (stdout and stderr)."""
    check_range("--tail", tail, 0)
    if offset is not None:
        check_range("--offset", offset, 0)
    if grep is not None:
        print_matches(job, grep, last_match, tail, as_json, offset or 0)
        return
    if rank is not None:
        check_range("--rank", rank, 0)
    c = client()
    if offset is not None:
        chunk = c.logs(job, tail=None, offset=offset)
    else:
        chunk = c.logs(job, tail=tail if rank is None else None)
    if rank is not None:  # the ranks' lines are prefixed "[rankN]: " (runtime/execution/gang.py)
        lines = filter_rank(chunk.text, rank).splitlines(keepends=True)
        chunk = chunk.model_copy(update={"text": "".join(lines[-tail:] if tail else [])})
    if as_json and not follow:
        emit_json(chunk)
        return
    if not follow:
        sys.stdout.write(chunk.text)
        return
    with still_running_on_interrupt([job]):  # from its first line on: Ctrl-C says so
        sys.stdout.write(chunk.text)
        sys.stdout.flush()
        follow_log(c, job, as_json, offset=chunk.next_offset, rank=rank)


def print_matches(
    job: str, pattern: str, last_match: bool, most: int, as_json: bool, start: int = 0
) -> None:
    """`air logs --grep`: the matching lines as LINE:text (at most ``most``, 200 at most), from
    byte ``start`` on; a search stopped early says the byte to go on from."""
    import dataclasses

    found = client().search_log(
        job, pattern, last_match=last_match, max_matches=most or 1, start=start
    )
    if as_json:
        emit_json(dataclasses.asdict(found))
        return
    sys.stdout.write("".join(f"{m.line}:{m.text}\n" for m in found.matches))
    if found.stopped_at is not None:
        why = "deadline" if found.stopped_by == "deadline" else "byte cap, AIR_LOG_SEARCH_MAX_MB"
        say(
            err,
            f"the search stopped at byte {found.stopped_at} of {found.size} ({why}):"
            f" go on with --offset {found.stopped_at}, or narrow the pattern",
        )
    elif found.total > len(found.matches):
        which = "last" if last_match else "first"
        say(
            err, f"{found.total} lines match; these are the {which} {len(found.matches)} (--tail N)"
        )


def follow_log(
    c: Any, job_id: str, as_json: bool, offset: int = 0, rank: Optional[int] = None
) -> None:
    """Print the job's output as it comes until the job ends, then its status (line or JSON);
    Ctrl-C stops the following, not the job (and says so)."""
    with still_running_on_interrupt([job_id]):
        _follow(c, job_id, as_json, offset, rank)


def _follow(c: Any, job_id: str, as_json: bool, offset: int, rank: Optional[int]) -> None:
    delay = 0.05
    partial = ""  # with --rank: a line not yet ended, filtered once it is

    def write(text: str) -> None:
        nonlocal partial
        if rank is not None:
            done, sep, partial = (partial + text).rpartition("\n")
            text = filter_rank(done + sep, rank)
        sys.stdout.write(text)

    while True:
        chunk = c.logs(job_id, tail=None, offset=offset)
        if chunk.text:
            write(chunk.text)
            sys.stdout.flush()
            delay = 0.05
        offset = chunk.next_offset
        if chunk.truncated:
            continue
        info = c.get(job_id)
        if info.status.is_terminal():
            tail = c.logs(job_id, tail=None, offset=offset)
            write(tail.text + ("\n" if rank is not None and partial else ""))
            if as_json:
                emit_json(info)
            else:
                say(err, info_line(info))
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


@handle_errors
def metrics(
    job: str = typer.Argument(...),
    history: list[str] = typer.Option([], "--history", help="metric key(s) to show over steps"),
    max_points: int = typer.Option(
        200, "--max-points", help="points of a --history curve at most (downsampled)"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Latest MLflow metrics of a job; --history KEY for their curve."""
    check_range("--max-points", max_points, 1)
    m = client().metrics(job, keys=history or None, history=bool(history), max_points=max_points)
    if as_json:
        emit_json(m)
        return
    t = Table(title=plain(f"{job}  run {m.run_id}"))
    t.add_column("metric")
    t.add_column("latest", justify="right")
    for k, v in sorted(m.latest.items()):
        t.add_row(plain(k), plain(f"{v:.6g}"))
    out.print(t)
    for key, points in m.history.items():
        say(out, Text.assemble((key, "bold"), f" ({len(points)} points)"))
        say(out, sparkline([p[1] for p in points]) + f"  {points[0][1]:.4g} → {points[-1][1]:.4g}")


def _values(latest: object) -> str:
    """A metric value, or (without --metric) each metric as ``key=value`` on its own line."""
    if isinstance(latest, dict):
        return "\n".join(f"{k}={_number(v)}" for k, v in sorted(latest.items())) or "-"
    return _number(latest) if latest is not None else "-"


def _number(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


@handle_errors
def compare(
    jobs: list[str] = typer.Argument(...),
    metric: Optional[str] = typer.Option(
        None, "--metric", help="the metric to rank by (default: every metric, latest values)"
    ),
    group_by: Optional[str] = typer.Option(
        None,
        "--group-by",
        help="seed (or your seed's config key): one row per config: n, mean, std",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Compare jobs: config diff against the first, latest and best of a metric."""
    if group_by:  # jobs alike but for their seed: a row each, best mean first
        from air_skills.batch import group_line
        from air_skills.errors import InvalidInput

        if not metric:
            raise InvalidInput("--group-by needs --metric", hint="add --metric val_loss")
        groups = client().seed_groups(jobs, metric, seed_key=group_by)
        if as_json:
            emit_json(groups)
            return
        for g in groups:
            say(out, f"{group_line(g, metric)}: {', '.join(g['members'])}")
        return
    table = client().compare(jobs, metric)
    if as_json:
        emit_json(table)
        return
    t = Table()
    for col in ("job", "status", "diff vs first", "latest", "best", "step"):
        t.add_column(col, no_wrap=col in ("job", "status"))
    for row in table:
        latest = row.get("latest")
        cells = (
            row["job_id"],
            row["status"],
            json.dumps(row["diff"]) if row["diff"] else "-",
            _values(latest),
            f"{row['best']:.6g}" if "best" in row else "-",
            str(row.get("step", "-")),
        )
        t.add_row(*map(plain, cells))  # config values and statuses: never markup
    out.print(t)
    mixed = [f"{row['job_id']}: {row['hardware']}" for row in table if row.get("hardware")]
    for line in mixed:  # results from different hardware classes do not compare
        out.print(plain(line))
