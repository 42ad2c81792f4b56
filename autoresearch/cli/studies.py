"""The study commands: run, status, report, stop, steer, suggest, export, serve (and host)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from air_skills.errors import InvalidInput
from autoresearch.cli.app import (
    STUDY_FAILED_EXIT,
    JsonOpt,
    _emit_summary,
    _guard,
    _print_json,
    _print_summary,
    _progress,
    app,
    err,
    out,
)
from autoresearch.host.cli import commands as host_commands


@app.command()
@_guard
def run(
    study: Path = typer.Argument(..., help="a study YAML file, or a study folder to resume"),
    resume: bool = typer.Option(False, "--resume", help="continue a killed or stopped study"),
    study_dir: Path | None = typer.Option(
        None, "--dir", help="study folder (default AIR_HOME/studies/<name>/)"
    ),
    poll_s: float = typer.Option(
        0.25, "--poll-s", help="longest wait between checks of running trials (s)"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Run a study until a budget is spent; `--resume` re-attaches to its running trials.

    Exit status: 0 the study finished; 3 it ran and failed (its baseline failed, no trial
    succeeded, or its own checks stopped it: the summary's `state` is `failed`); 2 a bad study
    file; 1 an error stopped the loop (a store gone, a refused API key); 130 interrupted.
    """
    from autoresearch.api import get_study
    from autoresearch.loop.loop import run_study

    result = run_study(study, study_dir, resume=resume, poll_s=poll_s, log=_progress(as_json))
    summary = get_study(result.study_dir)
    _emit_summary(summary, as_json)
    if summary["state"] == "failed":
        err.print(
            f"study failed ({summary.get('stop_reason') or 'no trial succeeded'}):"
            f" exit {STUDY_FAILED_EXIT}",
            highlight=False,
        )
        raise typer.Exit(STUDY_FAILED_EXIT)


@app.command()
@_guard
def status(
    study_dir: Path = typer.Argument(..., help="the study folder"),
    watch: bool = typer.Option(False, "--watch", help="refresh until the loop stops"),
    as_json: bool = JsonOpt,
) -> None:
    """Where a study stands: trials done and running, best, budget spent."""
    from autoresearch.api import get_study

    summary = get_study(study_dir)
    if as_json:
        _print_json(summary)
        return
    if not watch:
        _print_summary(summary)
        return
    from rich.live import Live

    with Live(console=out, refresh_per_second=1) as live:
        while True:
            summary = get_study(study_dir)
            table = Table(title=f"{summary['name']} — {summary['state']}")
            for col in ("trial", "status", summary["objective"]["metric"], "diff"):
                table.add_column(col)
            for r in summary["recent"] + summary["running"]:
                value = "" if r["value"] is None else f"{r['value']:.5g}"
                table.add_row(str(r["trial"]), r["status"], value, json.dumps(r["diff"]))
            best = summary["best"]
            table.caption = (
                f"best: trial {best['trial']} = {best.get('label') or best['value']}"
                if best
                else "no best yet"
            ) + f" · trials {summary['trials']['total']}/{summary['budget']['trials']['limit']}"
            live.update(table)
            if summary["state"] != "running":
                break
            time.sleep(2)
    _print_summary(summary)


@app.command()
@_guard
def report(
    study_dir: Path = typer.Argument(..., help="the study folder"),
    html: bool = typer.Option(
        False, "--html", help="also write report.html: the study page as one self-contained file"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Write report.md and objective.png (and with --html, report.html) into the study folder."""
    from autoresearch.report.report import write_report

    paths = write_report(study_dir)
    if html:
        from autoresearch.web.serve import write_html

        paths["html"] = str(write_html(study_dir))
    if as_json:
        _print_json(paths)
        return
    out.print(f"report: {paths['report']}\nplot:   {paths['plot']}")
    if html:
        out.print(f"html:   {paths['html']}")
    if paths["best"]:
        b = paths["best"]
        out.print(f"best:   trial {b['trial']} = {b['value']:.5g}  {b['diff'] or '(base config)'}")


@app.command()
@_guard
def stop(
    study_dir: Path = typer.Argument(..., help="the study folder"),
    keep_running: bool = typer.Option(
        False, "--keep-running", help="let running trials finish; launch no more"
    ),
    reason: str | None = typer.Option(None, "--reason", help="why, for the journal"),
    as_json: bool = JsonOpt,
) -> None:
    """Stop a study's loop (and cancel its running trials, unless --keep-running)."""
    from autoresearch.api import stop_study

    summary = stop_study(study_dir, cancel_running=not keep_running, reason=reason)
    _emit_summary(summary, as_json)


@app.command()
@_guard
def steer(
    study_dir: str = typer.Argument(..., help="the study folder (or its name)"),
    note: str | None = typer.Option(None, "--note", help="a note the proposer reads next"),
    enqueue: list[str] = typer.Option(
        [], "--enqueue", help="a config diff to run next, as JSON: '{\"lr\": 0.01}' (repeatable)"
    ),
    patch_file: list[Path] = typer.Option(
        [], "--enqueue-patch", help="a patch file to run next as a trial (repeatable)"
    ),
    budget: list[str] = typer.Option(
        [], "--budget", help="KEY=VALUE: a new limit (trials, wall_time_min, gpu_hours, llm_usd)"
    ),
    pin: list[str] = typer.Option([], "--pin", help="KEY=VALUE: pin a parameter (repeatable)"),
    as_json: bool = JsonOpt,
) -> None:
    """Steer a study without a restart: a note, trials to run next, a budget, pinned
    parameters. Journaled, shown by status and the report, kept across a resume."""
    import json

    from air_skills.cli.launch_spec import parse_value
    from autoresearch.api import steer_study

    def pairs(items: list[str], what: str) -> dict[str, object]:
        out: dict[str, object] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise typer.BadParameter(f"{what} {item!r}: give KEY=VALUE")
            out[key] = parse_value(value)
        return out

    queued: list[dict[str, object]] = []
    for text in enqueue:
        try:
            queued.append({"diff": json.loads(text)})
        except ValueError:
            raise typer.BadParameter(f"--enqueue {text!r}: not JSON") from None
    queued += [{"patch": p.read_text()} for p in patch_file]
    summary = steer_study(
        study_dir,
        note=note,
        enqueue=queued or None,
        budget=pairs(budget, "--budget") or None,  # type: ignore[arg-type]
        pin=pairs(pin, "--pin") or None,
    )
    if as_json:
        _emit_summary(summary, as_json)
    else:
        out.print(summary.get("steered", ""))


@app.command()
@_guard
def suggest(
    study: Path = typer.Argument(..., help="a study folder (uses its history) or study file"),
    n: int = typer.Option(1, "-n", help="how many diffs"),
    as_json: bool = JsonOpt,
) -> None:
    """The proposer's next N config diffs, without running them."""
    from autoresearch.api import suggest_trials

    result = suggest_trials(study, n)
    if as_json:
        _print_json(result)
        return
    for s in result["suggestions"]:
        out.print(
            Text.assemble(json.dumps(s["diff"]), "  ", (s["source"], "dim"), "  ", s["rationale"])
        )
        if s.get("patch"):
            out.print(Text(s["patch"]))


@app.command()
@_guard
def export(
    study_dir: Path = typer.Argument(..., help="the study folder"),
    branch: str = typer.Option(..., "--branch", help="the new branch to commit on"),
    trial: int | None = typer.Option(None, "--trial", help="a trial number (default: the best)"),
    as_json: bool = JsonOpt,
) -> None:
    """Commit the winner's code and config on a new branch (the current one is untouched)."""
    from autoresearch.report.export import export_study

    done = export_study(study_dir, branch, trial)
    if as_json:
        _print_json(done)
        return
    out.print(f"trial {done['trial']} -> branch {done['branch']} ({done['commit'][:12]})"
              f" in {done['repo']}")  # fmt: skip


@app.command()
@_guard
def serve(
    study_dirs: list[Path] = typer.Argument(
        None, help="study folders (default: ./studies, AIR_HOME/studies, the registry)"
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="beyond loopback: needs AIR_MCP_TOKEN"),
    port: int = typer.Option(8765, "--port"),
    mlflow_url: str = typer.Option(
        "http://127.0.0.1:5000", "--mlflow-url", help="where `air ui` serves MLflow (run links)"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """A live study page in the browser (JSON under /api/studies); read-only."""
    from autoresearch.web.serve import serve as serve_page

    if not 1 <= port <= 65535:
        raise InvalidInput(f"--port must be 1-65535, got {port}", hint="pass --port 8765")

    def announce(line: str) -> None:
        if as_json and line.startswith("study page: "):
            _print_json({"url": line.split()[2]})
        elif not as_json:
            out.print(line, soft_wrap=True)

    serve_page(list(study_dirs or []), host, port, mlflow_url, announce)


app.add_typer(host_commands(_guard), name="host")
