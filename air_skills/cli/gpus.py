"""`air` GPU commands: gpus, cordon, uncordon, doctor."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from air_skills.cli.output import (
    JsonOpt,
    client,
    emit_json,
    handle_errors,
    handle_errors_diagnosing,
    out,
)


@handle_errors
def gpus(as_json: bool = JsonOpt) -> None:
    """The GPU pool: health, cordons, and which jobs hold each GPU."""
    from air_skills.gpu.providers import provider

    c = client()
    items = c.gpus()
    if as_json:
        emit_json(items)
        return
    if not items:
        out.print(f"no GPUs: {provider().note}. CPU jobs (--gpus 0) still run.")
        return
    holders = c.holders() if hasattr(c, "holders") else {}
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
    from air_skills.gpu.doctor import pool_notes

    for line in pool_notes(items):
        out.print(line, highlight=False, markup=False)


@handle_errors
def cordon(
    gpu: int = typer.Argument(...),
    reason: str = typer.Option(..., "--reason"),
    as_json: bool = JsonOpt,
) -> None:
    """Keep a GPU out of the pool."""
    info = client().cordon(gpu, reason)
    emit_json(info) if as_json else out.print(f"GPU {gpu} cordoned: {reason}")


@handle_errors
def uncordon(
    gpu: int = typer.Argument(...),
    force: bool = typer.Option(False, "--force", help="skip the passing-check requirement"),
    as_json: bool = JsonOpt,
) -> None:
    """Bring a GPU back after a passing check."""
    info = client().uncordon(gpu, force=force)
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


@handle_errors_diagnosing
def doctor(
    deep: bool = typer.Option(False, "--deep", help="also run a short torch check per GPU"),
    as_json: bool = JsonOpt,
) -> None:
    """What this machine offers: GPUs and their health, AIR_HOME, versions; what to fix."""
    from air_skills.cli.doctor import run_doctor

    report = run_doctor(client(), deep=deep)
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
