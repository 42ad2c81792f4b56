"""`air`'s entry point, and its floor: `air ls --json` and `air status JOB --json` answered
without typer, rich or pydantic, for agents that call the CLI from a shell on every step
(`air launch ...` too, with or without --json, without typer or rich: cli/fast/launch.py).

The answer is the same JSON as the typer commands print (backends/job_view.py is the one
mapping, and tests compare the two); anything else (another command, another option, a
non-local backend with live jobs, an unexpected failure) goes to the typer app (cli/app.py).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    """The `air` command."""
    code = answer(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from air_skills.cli.app import main as app_main

    app_main()


def answer(args: list[str]) -> int | None:
    """The exit code after answering ``args`` here; None: the typer app answers them."""
    if args[:1] == ["launch"]:  # `air launch ... --json`: cli/fast/launch.py
        from air_skills.cli.fast.launch import answer as launch

        return launch(args[1:])
    asked = _parse(args)
    board = _parse_board(args) if asked is None else None
    if asked is None and board is None:
        return None
    from air_skills import settings
    from air_skills.errors import InvalidInput, NotFound, render_json

    try:
        settings.check_all()
        result = _run(*asked) if asked is not None else _board(*board)  # type: ignore[misc]
    except (InvalidInput, NotFound) as exc:  # a bad setting, an unknown or ambiguous id
        sys.stdout.write(render_json(exc) + "\n")
        return exc.exit_code
    except Exception:  # a store, disk or home problem: the typer path diagnoses and says it
        return None
    if result is None:
        return None
    sys.stdout.write(json.dumps(result, indent=1, default=str) + "\n")
    return 0


def _parse(args: list[str]) -> tuple[str, str | None, int] | None:
    """("ls", None, limit) or ("status", job, 0) for the forms answered here; else None."""
    if "--json" not in args:
        return None
    rest = [a for a in args if a != "--json"]
    if len(rest) == 2 and rest[0] == "status" and not rest[1].startswith("-"):
        return "status", rest[1], 0
    if rest == ["ls"]:
        return "ls", None, 50
    if len(rest) == 3 and rest[:2] == ["ls", "--limit"] and rest[2].isdigit():
        limit = int(rest[2])
        return ("ls", None, limit) if 1 <= limit <= 1000 else None
    return None


def _run(command: str, job: str | None, limit: int) -> Any:
    """The JSON answer (None: leave it to the typer app)."""
    from air_skills.backends.job_view import job_json
    from air_skills.runtime.launch.context import LaunchContext
    from air_skills.runtime.launch.orphans import sweep_orphans
    from air_skills.runtime.scheduling.passes import reconcile
    from air_skills.runtime.store.job_ids import resolve_job_id

    rt = LaunchContext(None, make_runs_here=False)
    store = rt.store
    job_id = resolve_job_id(store, job) if job is not None else None
    if any(name != "local" for name in store.live_backends()):
        return None  # Ray or Slurm jobs are settled by their backends: the Client does it
    sweep_orphans(rt)  # as Client.reconcile does
    reconcile(store)
    if job_id is not None:
        row = store.row(job_id)
        if row is None:
            return None  # the Client says not-found, in its words
        return job_json(row)
    return [job_json(r) for r in store.page_rows(limit=limit + 1)[:limit]]


def _parse_board(args: list[str]) -> tuple[str, str, str, int] | None:
    """(metric, order_by, direction, limit) for `air ls --json --metric M --best|--latest
    [--maximize] [--limit N]`, the leaderboard an agent reads; else None."""
    if args[:1] != ["ls"] or "--json" not in args or "--metric" not in args:
        return None
    metric, order_by, direction, limit = None, "best", "minimize", 50
    rest = [a for a in args[1:] if a != "--json"]
    while rest:
        flag = rest.pop(0)
        if flag in ("--best", "--latest"):
            order_by = flag[2:]
        elif flag == "--maximize":
            direction = "maximize"
        elif flag == "--metric" and rest and not rest[0].startswith("-"):
            metric = rest.pop(0)
        elif flag == "--limit" and rest and rest[0].isdigit() and 1 <= int(rest[0]) <= 1000:
            limit = int(rest.pop(0))
        else:
            return None  # any other option: the typer app
    return (metric, order_by, direction, limit) if metric else None


def _board(metric: str, order_by: str, direction: str, limit: int) -> Any:
    """The leaderboard's JSON, as `air ls --json --metric` prints it (each job with its
    score), from the results index (runtime/store/results_index.py)."""
    from air_skills.backends.job_view import job_json
    from air_skills.runtime.launch.context import LaunchContext
    from air_skills.runtime.launch.orphans import sweep_orphans
    from air_skills.runtime.results.finite import json_value
    from air_skills.runtime.runs.run_index import catch_up
    from air_skills.runtime.scheduling.passes import reconcile
    from air_skills.runtime.store import results_index

    rt = LaunchContext(None, make_runs_here=False)
    store = rt.store
    if any(name != "local" for name in store.live_backends()):
        return None
    sweep_orphans(rt)
    reconcile(store)
    catch_up(store)
    rows = results_index.leaderboard(store, metric, order_by, direction, None, limit).rows
    out = []
    for row, result in rows:
        score = result.score(direction) if result is not None else None
        shown = {k: json_value(v) for k, v in score.items()} if score else None
        out.append({**job_json(row), "score": shown})
    return out
