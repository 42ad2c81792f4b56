"""`air` job commands: launch, ls, status, wait, cancel, ui (results: cli/results.py)."""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand

from air_skills.cli.code import code_line
from air_skills.cli.launch_spec import launch_spec, parse_value, split_sets
from air_skills.cli.output import (
    JsonOpt,
    check_range,
    client,
    emit_json,
    handle_errors,
    info_line,
    out,
    plain,
    print_info,
    say,
    status_text,
    still_running_on_interrupt,
    wait_progress,
)
from air_skills.cli.results import follow_log
from air_skills.errors import InvalidInput

# --- launch ------------------------------------------------------------------------------------


class LaunchCommand(TyperCommand):
    """`air launch`: everything after the first `--` is the job's command, kept whole (its own
    options included) in ``ctx.args``; only what comes before it is parsed as ours."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        before, command = list(args), []
        if "--" in args:
            cut = args.index("--")
            before, command = list(args[:cut]), list(args[cut + 1 :])
        super().parse_args(ctx, before)
        ctx.args = command
        return command


@handle_errors
def launch(
    ctx: typer.Context,
    args: Optional[list[str]] = typer.Argument(None, help="[SPEC.yaml] [-- COMMAND ARGS...]"),
    name: Optional[str] = typer.Option(None, "--name", help="a short name for the job"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs the job needs (per node)"),
    procs: Optional[str] = typer.Option(
        None, "--procs", help="processes per node, run by torchrun (N, or gpu: one per GPU)"
    ),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="nodes (backend ray)"),
    priority: Optional[str] = typer.Option(None, "--priority", help="low | normal | high"),
    experiment: Optional[str] = typer.Option(
        None, "--experiment", help="MLflow experiment (created if missing)"
    ),
    set_: list[str] = typer.Option([], "--set", help="config override KEY=VALUE (YAML value)"),
    timeout_min: Optional[float] = typer.Option(
        None, "--timeout-min", help="time limit in minutes (then TIMED_OUT)"
    ),
    max_retries: Optional[int] = typer.Option(
        None, "--max-retries", help="retries after the job's own failure (default 0)"
    ),
    stall_timeout_min: Optional[float] = typer.Option(
        None,
        "--stall-timeout-min",
        help="minutes without progress before the job is stalled (0: off; AIR_STALL_TIMEOUT_MIN)",
    ),
    on_stall: Optional[str] = typer.Option(
        None, "--on-stall", help="fail | retry | notify (default: retry a collective hang once)"
    ),
    idempotency_key: Optional[str] = typer.Option(
        None, "--idempotency-key", help="a retry with the same key and spec returns the first job"
    ),
    backend: Optional[str] = typer.Option(None, "--backend", help="local | ray | slurm"),
    project: Optional[str] = typer.Option(
        None, "--project", help="the project whose GPU quota it uses (default: AIR_PROJECT)"
    ),
    data: list[str] = typer.Option([], "--data", help="data input NAME=PATH"),
    preemptible: Optional[bool] = typer.Option(
        None,
        "--preemptible/--not-preemptible",
        help="may be stopped and requeued for a higher-priority job",
    ),
    code: Optional[str] = typer.Option(
        None, "--code", help="snapshot (default: run a private copy of the code) | live"
    ),
    patch: Optional[str] = typer.Option(
        None, "--patch", help="a unified diff FILE (or - for stdin) applied to the snapshot"
    ),
    image: Optional[str] = typer.Option(
        None, "--image", help="run in this container image (podman or docker)"
    ),
    sandbox: Optional[str] = typer.Option(
        None, "--sandbox", help="auto | on | off: run in a sandbox (default AIR_SANDBOX: auto)"
    ),
    config_as: Optional[str] = typer.Option(
        None,
        "--config-as",
        help="file | args | both (default): the config as AIR_CONFIG_FILE and/or --key=value"
        " flags after the command",
    ),
    writable: list[str] = typer.Option(
        [], "--writable", help="a folder (under AIR_DATA_ROOTS) the sandboxed job may write"
    ),
    network: Optional[bool] = typer.Option(
        None, "--network/--no-network", help="--no-network: a sandboxed job has no network"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="validate (executable, script) and show; launch nothing"
    ),
    no_check_command: bool = typer.Option(
        False,
        "--no-check-command",
        help="launch even if the program or script is not there yet (the job creates it)",
    ),
    watch: bool = typer.Option(False, "--watch", help="follow the log until the job ends"),
    allow_duplicate: Optional[bool] = typer.Option(
        None,
        "--allow-duplicate/--no-duplicate",
        help="run even if the same experiment ran or runs (--no-duplicate: refuse it;"
        " default AIR_DEDUP)",
    ),
    seeds: Optional[str] = typer.Option(
        None, "--seeds", help="one job per seed, e.g. 0,1,2 (config key: --seed-key, default seed)"
    ),
    seed_key: str = typer.Option("seed", "--seed-key", help="the config key of --seeds"),
    grid: list[str] = typer.Option(
        [], "--grid", help="KEY=V1,V2,...: one job per combination (x seeds); repeatable"
    ),
    variants: Optional[str] = typer.Option(
        None,
        "--variants",
        help="a JSON or YAML file: a list of {config: {...}, patch: ...} (x grid x seeds)",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Launch a job: `air launch --gpus 1 -- python train.py --lr 3e-4`; a sweep (--seeds,
    --grid, --variants; up to 10,000 jobs, all checked before any is queued) gets a batch id
    that `air cancel` takes."""
    command = list(ctx.args)  # what followed `--` (LaunchCommand)
    # the options by parameter name, as cli/fast/launch.py gives them too (a test checks)
    given = {k: v for k, v in locals().items() if k not in ("ctx", "args", "command")}
    spec = launch_spec(list(args or []), command, given)
    c = client()
    if seeds or grid or variants:  # a sweep: every job checked before any is queued
        from air_skills.batch import MAX_SWEEP, expand, read_variants
        from air_skills.runtime.store.batches import new_batch_id

        values = {
            k: [parse_value(x) for x in v.split(",")] for k, v in split_sets(grid, "--grid").items()
        }
        key = spec.pop("idempotency_key", None)
        seed_list = [parse_value(x) for x in seeds.split(",")] if seeds else None
        more = read_variants(variants) if variants else None
        specs = expand(spec, seed_list, seed_key, values, more, limit=MAX_SWEEP)
        batch = new_batch_id()
        infos = c.launch_many(
            specs, dry_run=dry_run, idempotency_key=key, batch_id=batch, limit=MAX_SWEEP
        )
        if as_json:
            emit_json(infos)
            if not dry_run:
                print(f"batch_id: {batch}", file=sys.stderr)
            return
        shown = infos if len(infos) <= 50 else infos[:20]
        for one in shown:
            say(out, info_line(one))
        if len(shown) < len(infos):
            say(out, f"... and {len(infos) - len(shown)} more")
        if not dry_run:
            say(out, f"{len(infos)} job(s); batch_id {batch} (air cancel {batch})")
        return
    # strict: a command that would not start (`pyhton`, a misspelt script) is an
    # invalid-spec error, exit 2, dry run or not, as MCP's launch_job gives it
    info = c.launch(spec, dry_run=dry_run, strict=True)
    if as_json:
        emit_json(info)
    else:
        say(out, info_line(info))
    if watch and not dry_run:
        follow_log(c, info.job_id, as_json)


# --- reading -----------------------------------------------------------------------------------


@handle_errors
def ls(
    status: Optional[str] = typer.Option(
        None, "--status", help="only jobs in this state (QUEUED, RUNNING, SUCCEEDED, ...)"
    ),
    experiment: Optional[str] = typer.Option(
        None, "--experiment", help="only jobs of this MLflow experiment"
    ),
    project: Optional[str] = typer.Option(None, "--project", help="only jobs of this project"),
    launched_by: Optional[str] = typer.Option(
        None, "--launched-by", help="only jobs launched by this identity (or local user)"
    ),
    limit: int = typer.Option(50, "--limit", help="the most jobs to list (1-1000)"),
    metric: Optional[str] = typer.Option(
        None, "--metric", help="with --best or --latest: rank every matching job by it"
    ),
    best: bool = typer.Option(False, "--best", help="rank by the metric's best value"),
    latest: bool = typer.Option(False, "--latest", help="rank by the metric's latest value"),
    maximize: bool = typer.Option(False, "--maximize", help="higher is better (default: lower)"),
    sets: list[str] = typer.Option(
        [], "--config", help="only jobs whose config has key=value (repeatable)"
    ),
    study: Optional[str] = typer.Option(None, "--study", help="only this study's trials"),
    cursor: Optional[str] = typer.Option(None, "--cursor", help="the next page's cursor"),
    as_json: bool = JsonOpt,
) -> None:
    """List jobs, newest first; with --metric M --best (or --latest), a leaderboard of every
    matching job, best first (the results index: however many jobs there are)."""
    check_range("--limit", limit, 1, 1000)
    if (best or latest or sets or study) and not metric:
        raise InvalidInput(
            "--best, --latest, --config and --study rank jobs by a metric",
            hint="add --metric val_loss (and --best)",
        )
    direction = "maximize" if maximize else "minimize"
    order_by = "latest" if latest else "best" if (best or metric) else None
    config = {k: parse_value(v) for k, v in split_sets(sets, "--config").items()} if sets else None
    c = client()
    page = c.list(
        status=status,
        experiment=experiment,
        limit=limit,
        cursor=cursor,
        project=project,
        launched_by=launched_by,
        metric=metric,
        order_by=order_by,
        direction=direction,  # type: ignore[arg-type]
        config=config,
        study=study,
    )
    scores = c.scores([i.job_id for i in page.items], metric, direction) if metric else {}  # type: ignore[arg-type]
    if as_json:
        if metric:  # each job with its score (latest, best, their steps, finite)
            from air_skills.runtime.results.finite import json_value

            shown = {j: {k: json_value(v) for k, v in sc.items()} for j, sc in scores.items()}
            emit_json(
                [{**i.model_dump(mode="json"), "score": shown.get(i.job_id)} for i in page.items]
            )
        else:
            emit_json(page.items)
        return
    if metric:
        _leaderboard_table(page.items, scores, str(order_by), page.next_cursor, page.total)
        return
    # One line per job, ids whole (`air logs JOB` takes them, or a prefix): in a narrow
    # terminal the name, project and message are cut, never the id, status or time.
    # A pool shared by several launchers (air mcp-token) shows who launched each job.
    shared = len({i.launched_by for i in page.items}) > 1
    fixed = {"job": 14, "status": 9, "gpus": 4, "tries": 5, "created": 11}
    cols = ["job", "name", "status", "gpus", "project", "tries", "created", "message"]
    if shared:
        cols.insert(5, "by")
    room = max(12, out.width - sum(fixed.values()) - 2 * (len(cols) - 1))  # two spaces apart
    # Each cut column as wide as its longest cell, within its share of the room.
    longest = {
        "name": max((len(i.name) for i in page.items), default=4),
        "project": max((len(i.project) + 12 * bool(i.borrowing) for i in page.items), default=7),
        "by": max((len(i.launched_by or "-") for i in page.items), default=2),
    }
    share = {"name": 3, "project": 5, "by": 3}  # who launched: enough to tell agents apart
    cut = {k: max(4, min(v, room // share[k])) for k, v in longest.items()}
    cut["message"] = max(4, room - cut["name"] - cut["project"] - (cut["by"] if shared else 0))
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    for col in cols:
        width = fixed.get(col) or cut[col]
        t.add_column(col, no_wrap=True, overflow="ellipsis", width=width)
    for i in page.items:
        row = [
            plain(i.job_id),
            plain(_cut(i.name, cut["name"])),
            status_text(i),
            plain(",".join(map(str, i.gpus)) or "-"),
            plain(_cut(i.project + (" (borrowing)" if i.borrowing else ""), cut["project"])),
            plain(i.attempts),
            plain(i.created_at.strftime("%m-%d %H:%M")),
            plain(_cut(" ".join(i.message.split()), cut["message"])),
        ]
        if shared:
            row.insert(5, plain(_cut(i.launched_by or "-", cut["by"])))
        t.add_row(*row)
    out.print(t)
    if page.next_cursor:
        out.print(f"[dim]more: raise --limit (showing {len(page.items)})[/]")


def _leaderboard_table(
    items: list[Any], scores: dict[str, Any], order_by: str, cursor: str | None, total: int | None
) -> None:
    """`air ls --metric M --best`: rank, job, status, the value ranked by, its step, name."""
    from air_skills.runtime.results.finite import show_value

    t = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    for col in ("#", "job", "status", order_by, "step", "latest", "name"):
        t.add_column(col, no_wrap=True, overflow="ellipsis")
    for n, i in enumerate(items, 1):
        sc = scores.get(i.job_id) or {}
        step = sc.get("best_step" if order_by == "best" else "step")
        t.add_row(
            plain(n),
            plain(i.job_id),
            status_text(i),
            plain(show_value(sc.get(order_by))),
            plain("-" if step is None else step),
            plain(show_value(sc.get("latest"))),
            plain(_cut(i.name, 40)),
        )
    out.print(t)
    if cursor:
        out.print(f"[dim]{len(items)} of {total}: next page with --cursor {cursor}[/]")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


@handle_errors
def status(job: str = typer.Argument(...), as_json: bool = JsonOpt) -> None:
    """Show one job."""
    c = client()
    info = c.get(job)
    if as_json:
        emit_json(info)
        return
    print_info(info.model_copy(update={"code": None}))
    if info.code is not None:
        say(out, "code  " + code_line(info.code))
        patch = c.home / "jobs" / info.job_id / "code.patch"
        if info.code.patched and patch.is_file():
            say(out, f"patch {patch}")


@handle_errors
def wait(
    jobs: list[str] = typer.Argument(...),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds"),
    all_: bool = typer.Option(False, "--all", help="wait for all (default: any)"),
    as_json: bool = JsonOpt,
) -> None:
    """Wait until any (or --all) of the jobs end."""
    check_range("--timeout", timeout, 0)
    with still_running_on_interrupt(jobs):  # from the store's opening on
        c = client()
        if as_json or not sys.stderr.isatty():
            infos = c.wait(jobs, timeout_s=timeout, any=not all_)
        else:
            with wait_progress(len(jobs)) as progress:
                infos = c.wait(jobs, timeout_s=timeout, any=not all_, on_progress=progress)
    if as_json:
        emit_json(infos)
    else:
        for i in infos:
            say(out, info_line(i))


@handle_errors
def cancel(
    jobs: Optional[list[str]] = typer.Argument(None),
    all_: bool = typer.Option(False, "--all", help="cancel every queued and running job"),
    reason: Optional[str] = typer.Option(None, "--reason", help="why, kept in the job's message"),
    as_json: bool = JsonOpt,
) -> None:
    """Cancel jobs (SIGTERM, then SIGKILL after a grace period)."""
    c = client()
    if all_ == bool(jobs):
        raise InvalidInput("give job ids or --all (not both)", hint="air cancel JOB... | --all")
    if all_:
        infos = c.cancel_all(reason)
    else:
        from air_skills.runtime.store.batches import is_batch_id

        infos = []
        for j in jobs or []:  # a batch id (an `air launch` sweep's): all of its jobs
            # as `air cancel JOB`: running ones waited for (the grace period, their end)
            infos += c.cancel_batch(j, reason, 120.0) if is_batch_id(j) else [c.cancel(j, reason)]
    if as_json:
        emit_json(infos[0] if len(infos) == 1 and not all_ else infos)
    else:
        for i in infos:
            say(out, info_line(i))


@handle_errors
def ui(
    port: int = typer.Option(5000, "--port", help="the port on 127.0.0.1"),
    as_json: bool = JsonOpt,
) -> None:
    """Serve the MLflow UI on the default store, on 127.0.0.1, behind a token made per run
    (printed in the URL: jobs share loopback, and MLflow alone lets anyone rewrite runs)."""
    check_range("--port", port, 1, 65535)
    from air_skills.tracking.mlflow import tracking_uri
    from air_skills.tracking.ui_server import serve_ui

    home = client().home
    uri = tracking_uri(home)
    # studies have their own live page (autoresearch/web), linking each trial to this UI
    studies = "autoresearch serve [STUDY_DIR ...]  (prints its own URL with a token)"

    def announce(url: str) -> None:
        if as_json:
            emit_json({"url": url, "tracking_uri": uri, "study_page": studies})
            sys.stdout.flush()
        else:
            say(out, Text.assemble(f"MLflow UI for {uri} at ", (url, "bold"), " (Ctrl-C to stop)"))
            say(out, Text(f"live study pages: {studies}"))

    serve_ui(uri, home / "mlartifacts", "127.0.0.1", port, announce)
