"""`air` GPU commands: gpus, cordon, uncordon, doctor."""

from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from air_skills.cli.output import (
    JsonOpt,
    client,
    emit_json,
    handle_errors,
    handle_errors_diagnosing,
    out,
    plain,
    say,
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
    cap = c.capacity()
    cpu, gpu = cap["cpu_slots"], cap["gpus"]
    say(
        out,
        f"capacity: CPU slots {cpu['used']}/{cpu['total']} in use, {cpu['queued']} queued;"
        f" GPUs {gpu['used']}/{gpu['schedulable']} in use, {gpu['queued']} queued",
    )
    for line in c.excluded_nodes():  # Slurm's bad nodes (backends/slurm/cordons.py)
        say(out, line)
    if not items:
        say(out, f"no GPUs: {provider().note}. CPU jobs (--gpus 0) still run.")
        return
    holders = c.holders() if hasattr(c, "holders") else {}
    t = Table(title=plain(provider().note))
    for col in ("gpu", "name", "memory", "health", "cordoned", "jobs", "reason"):
        t.add_column(col)
    for g in items:
        health = plain("ok", "green") if g.health == "ok" else plain("unhealthy", "red")
        # Holders are shown by job name: job-derived text, never markup.
        jobs_text = ", ".join(holders.get(j, j) for j in g.job_ids) or "-"
        t.add_row(
            plain(g.index),
            plain(g.name),
            plain(f"{g.memory_mb // 1024} GiB"),
            health,
            plain("yes", "red") if g.cordoned else plain("no"),
            plain(jobs_text),
            plain(g.reason or ""),
        )
    out.print(t)
    from air_skills.gpu.doctor import pool_notes

    for line in pool_notes(items):
        say(out, line)


@handle_errors
def cordon(
    gpu: int = typer.Argument(...),
    reason: str = typer.Option(..., "--reason", help="why, shown by `air gpus`"),
    as_json: bool = JsonOpt,
) -> None:
    """Keep a GPU out of the pool."""
    info = client().cordon(gpu, reason)
    emit_json(info) if as_json else say(out, f"GPU {gpu} cordoned: {reason}")


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
        say(
            out,
            f"GPU {gpu} back in the pool, forced past a failing check ({info.reason});"
            " recorded. Each job's preflight still checks it",
        )
    else:
        out.print(f"GPU {gpu} back in the pool (its check passes)")


@handle_errors_diagnosing
def doctor(
    deep: bool = typer.Option(False, "--deep", help="also run a short torch check per GPU"),
    rebuild: bool = typer.Option(
        False, "--rebuild", help="record the job folders that the state database does not know"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="with --rebuild: only say what it would do"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """What this machine offers: GPUs and their health, AIR_HOME, versions; what to fix.
    --rebuild: records for job folders a lost, restored or foreign air.db does not know."""
    from air_skills.cli.doctor import rebuild_records, run_doctor

    if rebuild or dry_run:
        rebuild_records(dry_run, as_json)
        return
    report = run_doctor(client(), deep=deep)
    if as_json:
        emit_json(report)
        return
    marks = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "red")}
    for item in report["checks"]:
        mark, style = marks[item["status"]]
        # Details hold paths, GPU names and job text: never markup.
        say(
            out,
            Text.assemble(
                (f"{mark:>5}", style), "  ", (item["name"], "bold"), ": ", item["detail"]
            ),
        )
        if item.get("next"):
            say(out, f"       next: {item['next']}")
