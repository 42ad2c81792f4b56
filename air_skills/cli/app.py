"""The ``air`` command: a thin layer over ``air_skills.Client``. Every command takes --json."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from air_skills.errors import AirError, InvalidInput, InvalidSpec

app = typer.Typer(
    help="AIR Skills: launch, watch and cancel ML jobs on GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
quota_app = typer.Typer(help="Per-project GPU quotas.", no_args_is_help=True)
skills_app = typer.Typer(
    help="Agent skills (SKILL.md) for Claude, Cursor, Codex.", no_args_is_help=True
)
app.add_typer(quota_app, name="quota")
app.add_typer(skills_app, name="skills")

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


def _client() -> Any:
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


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print AirErrors as `error[code]: message` + `hint:` (or JSON); exit 2 or 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AirError as exc:
            if kwargs.get("as_json"):
                sys.stdout.write(json.dumps({"error": exc.to_dict()}, default=str) + "\n")
            else:
                err.print(
                    f"[bold red]error\\[{exc.code}][/]: {escape(exc.message)}", highlight=False
                )
                if getattr(exc, "problems", None) and not exc.message.endswith(
                    "; ".join(exc.problems)
                ):
                    for p in exc.problems:
                        err.print(f"  - {escape(p)}", highlight=False)
                if exc.hint:
                    err.print(f"[bold]hint[/]: {escape(exc.hint)}", highlight=False)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


def _info_line(info: Any) -> str:
    style = STATUS_STYLE.get(info.status.value, "")
    gpus = ",".join(map(str, info.gpus)) or "-"
    return f"{info.job_id}  [{style}]{info.status.value}[/]  gpus={gpus}  {info.message}"


def _print_info(info: Any) -> None:
    t = Table(show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    data = info.model_dump(mode="json")
    data["status"] = f"[{STATUS_STYLE.get(info.status.value, '')}]{info.status.value}[/]"
    for key, value in data.items():
        if value in (None, [], ""):
            continue
        t.add_row(key, str(value))
    out.print(t)


# --- launch ------------------------------------------------------------------------------------


def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _spec_from_args(
    spec_file: Optional[Path], command: list[str], options: dict[str, Any]
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if spec_file is not None:
        import yaml

        try:
            loaded = yaml.safe_load(spec_file.read_text())
        except OSError as exc:
            raise InvalidInput(
                f"cannot read {spec_file}: {exc.strerror}", hint="give a readable YAML file"
            ) from None
        except yaml.YAMLError as exc:
            raise InvalidSpec(
                f"{spec_file} is not valid YAML: {exc}", hint="fix the YAML"
            ) from None
        if not isinstance(loaded, dict):
            raise InvalidSpec(f"{spec_file} must hold a mapping of JobSpec fields", hint="")
        spec.update(loaded)
    if command:
        spec["command"] = command
    for key, value in options.items():
        if value not in (None, [], {}):
            spec[key] = value
    if "command" not in spec:
        raise InvalidSpec(
            "no command to run",
            hint="give it after `--` (air launch -- python train.py) or in the spec file",
        )
    return spec


def _split_sets(sets: list[str], what: str) -> dict[str, Any]:
    out_: dict[str, Any] = {}
    problems = []
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            problems.append(f"{what} {item!r} is not KEY=VALUE")
            continue
        out_[key.strip()] = value
    if problems:
        raise InvalidSpec("bad options:", problems=problems, hint=f"write {what} KEY=VALUE")
    return out_


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
@handle_errors
def launch(
    args: Optional[list[str]] = typer.Argument(None, help="[SPEC.yaml] [-- COMMAND ARGS...]"),
    name: Optional[str] = typer.Option(None, "--name"),
    gpus: Optional[int] = typer.Option(None, "--gpus"),
    priority: Optional[str] = typer.Option(None, "--priority", help="low | normal | high"),
    experiment: Optional[str] = typer.Option(None, "--experiment"),
    set_: list[str] = typer.Option([], "--set", help="config override KEY=VALUE (YAML value)"),
    timeout_min: Optional[float] = typer.Option(None, "--timeout-min"),
    max_retries: Optional[int] = typer.Option(None, "--max-retries"),
    idempotency_key: Optional[str] = typer.Option(None, "--idempotency-key"),
    backend: Optional[str] = typer.Option(None, "--backend", help="local | ray"),
    project: Optional[str] = typer.Option(None, "--project"),
    data: list[str] = typer.Option([], "--data", help="data input NAME=PATH"),
    preemptible: Optional[bool] = typer.Option(None, "--preemptible/--not-preemptible"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and show; launch nothing"),
    watch: bool = typer.Option(False, "--watch", help="follow the log until the job ends"),
    as_json: bool = JsonOpt,
) -> None:
    """Launch a job: `air launch --gpus 1 -- python train.py --lr 3e-4`."""
    args = list(args or [])
    command: list[str] = []
    spec_file: Optional[Path] = None
    if "--" in sys.argv:
        n_after = len(sys.argv) - sys.argv.index("--") - 1
        command = args[len(args) - n_after :] if n_after else []
        before = args[: len(args) - n_after]
    else:
        before = args
    if before:
        if len(before) > 1 or not before[0].endswith((".yaml", ".yml", ".json")):
            raise InvalidInput(
                f"unexpected arguments {before!r}",
                hint="put the command after `--`: air launch [SPEC.yaml] -- COMMAND ARGS",
            )
        spec_file = Path(before[0])
    config = {k: _parse_value(v) for k, v in _split_sets(set_, "--set").items()}
    options: dict[str, Any] = {
        "name": name,
        "gpus": gpus,
        "priority": priority,
        "experiment": experiment,
        "timeout_min": timeout_min,
        "max_retries": max_retries,
        "idempotency_key": idempotency_key,
        "backend": backend,
        "project": project,
        "preemptible": preemptible,
        "data": [{"name": k, "path": v} for k, v in _split_sets(data, "--data").items()],
    }
    spec = _spec_from_args(spec_file, command, options)
    if config:
        spec["config"] = {**(spec.get("config") or {}), **config}
    client = _client()
    info = client.launch(spec, dry_run=dry_run)
    if as_json:
        emit_json(info)
    else:
        out.print(_info_line(info), highlight=False)
    if watch and not dry_run:
        _follow(client, info.job_id, as_json)


# --- reading -----------------------------------------------------------------------------------


@app.command("ls")
@handle_errors
def ls(
    status: Optional[str] = typer.Option(None, "--status"),
    experiment: Optional[str] = typer.Option(None, "--experiment"),
    project: Optional[str] = typer.Option(None, "--project"),
    limit: int = typer.Option(50, "--limit"),
    as_json: bool = JsonOpt,
) -> None:
    """List jobs, newest first."""
    page = _client().list(status=status, experiment=experiment, limit=limit, project=project)
    if as_json:
        emit_json(page.items)
        return
    t = Table(title=None)
    for col in ("job", "name", "status", "gpus", "project", "attempts", "created", "message"):
        t.add_column(col, overflow="fold" if col == "message" else "ellipsis")
    for i in page.items:
        t.add_row(
            i.job_id,
            i.name[:24],
            f"[{STATUS_STYLE.get(i.status.value, '')}]{i.status.value}[/]",
            ",".join(map(str, i.gpus)) or "-",
            i.project + (" (borrowing)" if i.borrowing else ""),
            str(i.attempts),
            i.created_at.strftime("%m-%d %H:%M:%S"),
            i.message[:80],
        )
    out.print(t)
    if page.next_cursor:
        out.print(f"[dim]more: raise --limit (showing {len(page.items)})[/]")


@app.command()
@handle_errors
def status(job: str = typer.Argument(...), as_json: bool = JsonOpt) -> None:
    """Show one job."""
    info = _client().get(job)
    if as_json:
        emit_json(info)
    else:
        _print_info(info)


@app.command()
@handle_errors
def logs(
    job: str = typer.Argument(...),
    tail: int = typer.Option(100, "--tail"),
    follow: bool = typer.Option(False, "--follow", "-f"),
    as_json: bool = JsonOpt,
) -> None:
    """Print a job's output (stdout and stderr)."""
    client = _client()
    chunk = client.logs(job, tail=tail)
    if as_json and not follow:
        emit_json(chunk)
        return
    sys.stdout.write(chunk.text)
    sys.stdout.flush()
    if follow:
        _follow(client, job, as_json, offset=chunk.next_offset)


def _follow(client: Any, job_id: str, as_json: bool, offset: int = 0) -> None:
    delay = 0.05
    while True:
        chunk = client.logs(job_id, tail=None, offset=offset)
        if chunk.text:
            sys.stdout.write(chunk.text)
            sys.stdout.flush()
            delay = 0.05
        offset = chunk.next_offset
        if chunk.truncated:
            continue
        info = client.get(job_id)
        if info.status.is_terminal():
            tail = client.logs(job_id, tail=None, offset=offset)
            sys.stdout.write(tail.text)
            if as_json:
                emit_json(info)
            else:
                err.print(_info_line(info), highlight=False)
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


@app.command()
@handle_errors
def metrics(
    job: str = typer.Argument(...),
    history: list[str] = typer.Option([], "--history", help="metric key(s) to show over steps"),
    max_points: int = typer.Option(200, "--max-points"),
    as_json: bool = JsonOpt,
) -> None:
    """Latest MLflow metrics of a job; --history KEY for their curve."""
    m = _client().metrics(job, keys=history or None, history=bool(history), max_points=max_points)
    if as_json:
        emit_json(m)
        return
    t = Table(title=f"{job}  run {m.run_id}")
    t.add_column("metric")
    t.add_column("latest", justify="right")
    for k, v in sorted(m.latest.items()):
        t.add_row(k, f"{v:.6g}")
    out.print(t)
    for key, points in m.history.items():
        out.print(f"[bold]{key}[/] ({len(points)} points)")
        out.print(
            _sparkline([p[1] for p in points]) + f"  {points[0][1]:.4g} → {points[-1][1]:.4g}"
        )


def _sparkline(values: list[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    lo, hi = min(values), max(values)
    step = max(1, len(values) // 60)
    vals = values[::step]
    if hi == lo:
        return bars[0] * len(vals)
    return "".join(bars[int((v - lo) / (hi - lo) * (len(bars) - 1))] for v in vals)


@app.command()
@handle_errors
def compare(
    jobs: list[str] = typer.Argument(...),
    metric: Optional[str] = typer.Option(None, "--metric"),
    as_json: bool = JsonOpt,
) -> None:
    """Compare jobs: config diff against the first, latest and best of a metric."""
    table = _client().compare(jobs, metric)
    if as_json:
        emit_json(table)
        return
    t = Table()
    for col in ("job", "status", "diff vs first", "latest", "best", "step"):
        t.add_column(col)
    for row in table:
        latest = row.get("latest")
        t.add_row(
            row["job_id"],
            row["status"],
            json.dumps(row["diff"]) if row["diff"] else "-",
            f"{latest:.6g}" if isinstance(latest, float) else str(latest or "-"),
            f"{row['best']:.6g}" if "best" in row else "-",
            str(row.get("step", "-")),
        )
    out.print(t)


@app.command()
@handle_errors
def wait(
    jobs: list[str] = typer.Argument(...),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds"),
    all_: bool = typer.Option(False, "--all", help="wait for all (default: any)"),
    as_json: bool = JsonOpt,
) -> None:
    """Wait until any (or --all) of the jobs end."""
    client = _client()
    if as_json or not sys.stderr.isatty():
        infos = client.wait(jobs, timeout_s=timeout, any=not all_)
    else:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]waiting"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} done"),
            TimeElapsedColumn(),
            console=err,
        ) as bar:
            task = bar.add_task("wait", total=len(jobs))

            def progress(infos: list[Any]) -> None:
                bar.update(task, completed=sum(i.status.is_terminal() for i in infos))

            infos = client.wait(jobs, timeout_s=timeout, any=not all_, on_progress=progress)
    if as_json:
        emit_json(infos)
    else:
        for i in infos:
            out.print(_info_line(i), highlight=False)


@app.command()
@handle_errors
def cancel(
    jobs: Optional[list[str]] = typer.Argument(None),
    all_: bool = typer.Option(False, "--all", help="cancel every queued and running job"),
    reason: Optional[str] = typer.Option(None, "--reason"),
    as_json: bool = JsonOpt,
) -> None:
    """Cancel jobs (SIGTERM, then SIGKILL after a grace period)."""
    client = _client()
    if all_ == bool(jobs):
        raise InvalidInput("give job ids or --all (not both)", hint="air cancel JOB... | --all")
    if all_:
        infos = client.cancel_all(reason)
    else:
        infos = [client.cancel(j, reason) for j in jobs or []]
    if as_json:
        emit_json(infos[0] if len(infos) == 1 and not all_ else infos)
    else:
        for i in infos:
            out.print(_info_line(i), highlight=False)


# --- GPUs ---------------------------------------------------------------------------------------


@app.command()
@handle_errors
def gpus(as_json: bool = JsonOpt) -> None:
    """The GPU pool: health, cordons, and which jobs hold each GPU."""
    from air_skills.gpu.providers import provider

    client = _client()
    items = client.gpus()
    if as_json:
        emit_json(items)
        return
    if not items:
        out.print(f"no GPUs: {provider().note}. CPU jobs (--gpus 0) still run.")
        return
    holders = client.holders() if hasattr(client, "holders") else {}
    t = Table(title=provider().note)
    for col in ("gpu", "name", "memory", "health", "cordoned", "jobs", "reason"):
        t.add_column(col)
    for g in items:
        health = "[green]ok[/]" if g.health == "ok" else "[red]unhealthy[/]"
        jobs_text = ", ".join(holders.get(j, j) for j in g.job_ids) or "-"
        t.add_row(
            str(g.index),
            g.name,
            f"{g.memory_mb // 1024} GiB",
            health,
            "[red]yes[/]" if g.cordoned else "no",
            jobs_text,
            escape(g.reason or ""),
        )
    out.print(t)
    from air_skills.gpu.health import pool_notes

    for line in pool_notes(items):
        out.print(line, highlight=False, markup=False)


@app.command()
@handle_errors
def cordon(
    gpu: int = typer.Argument(...),
    reason: str = typer.Option(..., "--reason"),
    as_json: bool = JsonOpt,
) -> None:
    """Keep a GPU out of the pool."""
    info = _client().cordon(gpu, reason)
    emit_json(info) if as_json else out.print(f"GPU {gpu} cordoned: {reason}")


@app.command()
@handle_errors
def uncordon(
    gpu: int = typer.Argument(...),
    force: bool = typer.Option(False, "--force", help="skip the passing-check requirement"),
    as_json: bool = JsonOpt,
) -> None:
    """Bring a GPU back after a passing check."""
    info = _client().uncordon(gpu, force=force)
    if as_json:
        emit_json(info)
    elif info.health != "ok":  # only --force gets here while the check fails
        out.print(
            f"GPU {gpu} back in the pool, forced past a failing check ({info.reason});"
            " recorded. Each job's preflight still checks it",
            highlight=False,
            markup=False,
        )
    else:
        out.print(f"GPU {gpu} back in the pool (its check passes)")


@app.command()
@handle_errors
def doctor(
    deep: bool = typer.Option(False, "--deep", help="also run a short torch check per GPU"),
    as_json: bool = JsonOpt,
) -> None:
    """What this machine offers: GPUs and their health, AIR_HOME, versions; what to fix."""
    from air_skills.gpu.doctor import run_doctor

    report = run_doctor(_client(), deep=deep)
    if as_json:
        emit_json(report)
        return
    for item in report["checks"]:
        mark = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}[
            item["status"]
        ]
        out.print(f"{mark:>5}  [bold]{item['name']}[/]: {item['detail']}", highlight=False)
        if item.get("next"):
            out.print(f"       next: {item['next']}", highlight=False)


@app.command()
@handle_errors
def ui(
    port: int = typer.Option(5000, "--port"),
    as_json: bool = JsonOpt,
) -> None:
    """Serve the MLflow UI on the default store, on 127.0.0.1."""
    import subprocess

    from air_skills.tracking.mlflow import tracking_uri

    client = _client()
    uri = tracking_uri(client.home)
    url = f"http://127.0.0.1:{port}"
    if as_json:
        emit_json({"url": url, "tracking_uri": uri})
    else:
        out.print(f"MLflow UI for {uri} at [bold]{url}[/] (Ctrl-C to stop)")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    raise typer.Exit(subprocess.call(argv, env=env))


# --- quotas, skills, mcp-config -------------------------------------------------------------


@quota_app.command("set")
@handle_errors
def quota_set(
    project: str = typer.Argument(...),
    gpus_: int = typer.Option(..., "--gpus"),
    as_json: bool = JsonOpt,
) -> None:
    """Give PROJECT a GPU quota (it may borrow idle GPUs beyond it)."""
    from air_skills.quotas import set_quota

    result = set_quota(_client(), project, gpus_)
    if as_json:
        emit_json(result)
    else:
        out.print(f"project {project}: quota {gpus_} GPUs")
        if result.get("warning"):
            err.print(f"[yellow]warning[/]: {result['warning']}")


@quota_app.command("ls")
@handle_errors
def quota_ls(as_json: bool = JsonOpt) -> None:
    """Quotas and who uses what."""
    from air_skills.quotas import list_quotas, shared_gpus

    client = _client()
    rows = list_quotas(client)
    if as_json:
        emit_json(rows)
        return
    t = Table()
    for col in ("project", "quota", "in use", "borrowing", "queued"):
        t.add_column(col)
    for r in rows:
        quota = "-" if r["quota"] is None else str(r["quota"])
        t.add_row(r["project"], quota, str(r["in_use"]), str(r["borrowing"]), str(r["queued"]))
    out.print(t)
    out.print(f"projects without a quota (-) share {shared_gpus(client)} GPUs", highlight=False)


@quota_app.command("rm")
@handle_errors
def quota_rm(project: str = typer.Argument(...), as_json: bool = JsonOpt) -> None:
    """Drop PROJECT's quota: its jobs then share what the other quotas leave."""
    from air_skills.quotas import remove_quota

    result = remove_quota(_client(), project)
    emit_json(result) if as_json else out.print(f"project {project}: quota removed")


@skills_app.command("install")
@handle_errors
def skills_install(
    target: str = typer.Option("claude", "--target", help="claude | cursor | codex | DIR"),
    project: bool = typer.Option(False, "--project", help="into this project, not the user's"),
    force: bool = typer.Option(False, "--force", help="overwrite locally changed files"),
    as_json: bool = JsonOpt,
) -> None:
    """Copy the AIR agent skills where an agent finds them."""
    from air_skills.integrations.skills import install_skills

    written = install_skills(target, project=project, force=force)
    if as_json:
        emit_json(written)
    else:
        for item in written["files"]:
            out.print(f"{item['action']:>9}  {item['path']}", highlight=False, markup=False)
        err.print(f"skills: {', '.join(written['skills'])} in {written['dir']}", markup=False)


@app.command("mcp-config")
@handle_errors
def mcp_config(
    client_name: str = typer.Argument("claude", help="claude | claude-code | cursor | vscode"),
    write: bool = typer.Option(False, "--write", help="merge into the client's config file"),
    as_json: bool = JsonOpt,
) -> None:
    """Print (or --write) the MCP config entry that runs air-mcp for a client."""
    from air_skills.integrations.skills import mcp_config as make_config

    result = make_config(client_name, write=write)
    if as_json:
        emit_json(result)
    else:
        out.print(result["text"], highlight=False, markup=False)
        if write:
            backup = result.get("backup") or "none"
            err.print(f"{result['action']}: {result['path']} (backup: {backup})", markup=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
