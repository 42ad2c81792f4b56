"""The ``autoresearch`` command: run, watch, report, stop studies, and the offline demo.

Every command takes ``--json``; exit 0 on success, 2 on bad input, 1 otherwise, and `run`
exits 3 when the study ran and failed (STUDY_FAILED_EXIT). Errors print ``[code] what
happened`` and ``Next: what to do``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from air_skills import settings
from air_skills.errors import AirError, InvalidInput, NotFound, render_json, render_text

app = typer.Typer(
    help="autoresearch: proposers suggest config diffs, trials run in parallel on the GPU pool,"
    " losers stop early, the best is kept, within hard budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: no `<bool>` after flags
)
# Markup off: trial names, diffs, error lines and paths come from jobs and users, and
# `[/data/shard-0]` must print as it is, not end (or crash) a rich style. Styles are Text.
# Trial names and errors are job text: never markup, never emoji codes.
out = Console(markup=False, emoji=False)
err = Console(stderr=True, markup=False, emoji=False)
JsonOpt = typer.Option(False, "--json", help="print JSON for agents and scripts")

# `autoresearch run`: the study ran to its end and failed (its state `failed`: the baseline
# failed, no trial succeeded, or one of its own checks stopped it); 1 stays for an error that
# stopped the loop itself (a store gone, a refused key), 2 for a bad study file.
STUDY_FAILED_EXIT = 3
DEMO_TRIALS = 12
# The demo's trials: a few CPU seconds each (300 steps), from a base whose lr is too low for so
# short a run, so that 12 trials show a clear win over the baseline on any machine, loaded too.
DEMO_BASE = {"steps": 300, "eval_every": 50, "lr": 1.0e-3}


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn AIR errors into `[code] message` + `Next: hint` and the contract's exit codes."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = kwargs.get("as_json", False)
        try:
            return fn(*args, **kwargs)
        except AirError as exc:
            if as_json:
                print(render_json(exc))
            else:
                err.print(render_text(exc), highlight=False)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _progress(as_json: bool) -> Callable[[str], None]:
    def log(line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        err.print(Text.assemble((stamp, "dim"), " ", line), highlight=False, soft_wrap=True)

    return log


def _emit_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(summary)
    else:
        _print_summary(summary)


def _print_summary(s: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("study", f"{s['name']}  ({s['study_dir']})")
    state = s["state"] + (f" ({s['stop_reason']})" if s.get("stop_reason") else "")
    table.add_row("state", state)
    t = s["trials"]
    used = s["budget"]["trials"].get("used", t["total"])
    fb = s["budget"].get("final") or {}
    extra = f" + {fb['used']} final re-runs" if fb.get("used") else ""
    table.add_row(
        "trials",
        f"{used}/{s['budget']['trials']['limit']}{extra}: "
        + ", ".join(f"{v} {k}" for k, v in t.items() if k != "total" and v),
    )
    best = s.get("best")
    if best:
        diff = ", ".join(f"{k}={v}" for k, v in best["diff"].items()) or "(base config)"
        label = best.get("label") or f"{best['value']:.5g}"
        table.add_row("best", f"trial {best['trial']}: {s['objective']['metric']}={label}  {diff}")
    fin = s.get("final") or {}
    if fin.get("state") == "done" and fin.get("winner") is not None:
        table.add_row("final", f"trial {fin['winner']} (re-run with fresh seeds): {fin['verdict']}")
    elif fin.get("state") == "running":
        table.add_row("final", "re-running trials " + ", ".join(map(str, fin["finalists"])))
    noise = s["noise"]
    if noise["repeats"]:
        floor = "measuring" if noise["floor"] is None else f"{noise['floor']:.4g}"
        table.add_row("noise floor", floor)
    b = s["budget"]
    spent = [f"wall {b['wall_time_min']['used']:.1f} min"]
    if b["wall_time_min"]["limit"]:
        spent[-1] += f" / {b['wall_time_min']['limit']:g}"
    spent.append(f"GPU-h {b['gpu_hours']['used']:.3f}")
    if b["gpu_hours"]["limit"]:
        spent[-1] += f" / {b['gpu_hours']['limit']:g}"
    if s["proposer"] == "llm" or b["llm_usd"]["calls"]:
        spent.append(f"LLM ${b['llm_usd']['used']:.4f} / ${b['llm_usd']['limit']:g}")
    table.add_row("budget", " · ".join(spent))
    c = s.get("cost")
    if c:
        per = (
            f" · ${c['usd_per_improvement']:.4f} per kept improvement"
            if c["usd_per_improvement"] is not None
            else ""
        )
        table.add_row(
            "cost", f"${c['usd']:.4f} (GPU ${c['gpu_usd']:.4f}, LLM ${c['llm_usd']:.4f}){per}"
        )
    for r in s["running"]:
        table.add_row(
            "running", f"trial {r['trial']} {r['job_id'] or '(not launched)'} {r['diff'] or ''}"
        )
    if s.get("last_error"):
        table.add_row("error", f"[{s['last_error']['code']}] {s['last_error']['message']}")
    if s.get("report"):
        table.add_row("report", s["report"])
    if s.get("hint"):
        table.add_row("next", s["hint"])
    out.print(table)


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


from autoresearch.host.cli import commands as host_commands  # noqa: E402

app.add_typer(host_commands(_guard), name="host")


# --- the demo ------------------------------------------------------------------------------


def find_examples() -> Path:
    """The repository's examples/ folder: under the current folder, else beside the package."""
    import autoresearch

    for root in (Path.cwd(), Path(autoresearch.__file__).resolve().parents[1]):
        if (root / "examples" / "mlp" / "study.yaml").exists():
            return root / "examples"
    raise NotFound(
        "the demo needs examples/mlp/ (train.py, study.yaml) and found it neither under the"
        " current folder"
        " nor beside the installed package",
        hint="run `autoresearch demo` from a clone of the repository",
    )


def demo_study(examples: Path, proposer: str, trials: int) -> dict[str, Any]:
    """The MLP example's own study file, made small: 2 trials at a time, no GPU, a few CPU
    seconds per trial, and runnable from any folder. Budgeted by trials, not wall time: a
    loaded machine runs the same study, only later."""
    from autoresearch.study.study import read_yaml

    study = read_yaml(examples / "mlp" / "study.yaml")
    proposer_cfg: dict[str, Any] = {"type": proposer}
    if proposer == "llm":
        use_openai = os.environ.get("OPENAI_API_KEY") and not os.environ.get("ANTHROPIC_API_KEY")
        proposer_cfg = {"type": "llm", "provider": "openai" if use_openai else "anthropic"}
    study.update(
        name=f"demo-{study['name']}-{proposer}",
        workdir=str(examples.parent),
        budget={"trials": trials, "concurrency": 2, "llm_usd": 0.25},
        gpus_per_trial=0,
        proposer=proposer_cfg,
        base_config={**study["base_config"], **DEMO_BASE},
        early_stopping={"type": "median", "min_steps": 150},
        noise={"repeats": 2},  # a held-out split needs a noise floor
        final={"top_k": 2, "seeds": 2},  # the final re-evaluation, kept small
        program="The base config trains for only 300 steps with a low lr: it underfits."
        " Find a config that reaches a lower val_loss in those 300 steps.",
    )
    return study


def demo_held_out(study: dict[str, Any], log: Callable[[str], None]) -> None:
    """Let the demo's final runs read the example's held-out input: its folder joins this
    process's AIR_DATA_ROOTS (its launches carry them). Where no sandbox can be made, the
    search's trials run unsandboxed (the input is still bound only into the final runs)."""
    from air_skills.runtime.execution import sandbox

    held = study["objective"]["holdout"]["data"]
    folders = [os.path.realpath(os.path.join(study["workdir"], d["path"])) for d in held]
    roots = [r for r in (settings.get("AIR_DATA_ROOTS") or "").split(os.pathsep) if r]
    os.environ["AIR_DATA_ROOTS"] = os.pathsep.join([*roots, *folders])
    why = sandbox.unavailable()
    if why is not None:
        study["sandbox"] = "off"
        log(
            f"no sandbox here ({why}): trials run unsandboxed; the held-out input is bound"
            " into the final runs only"
        )


@app.command()
@_guard
def demo(
    proposer: str = typer.Option("tpe", "--proposer", help="tpe | random | llm (needs a key)"),
    trials: int = typer.Option(DEMO_TRIALS, "--trials", help="trials in all, baseline included"),
    study_dir: Path | None = typer.Option(None, "--dir", help="study folder"),
    no_page: bool = typer.Option(
        False, "--no-page", help="do not serve the live study page (127.0.0.1:8765) meanwhile"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Run a small study on the bundled MLP example: no GPU, no server, a few minutes.

    Exit status as `run`'s: 0 the study finished, 3 it ran and failed."""
    from autoresearch.api import get_study
    from autoresearch.loop.loop import run_study

    if proposer not in ("tpe", "random", "llm"):
        raise InvalidInput(f"unknown proposer {proposer!r}", hint="use tpe, random or llm")
    examples = find_examples()
    study = demo_study(examples, proposer, trials)
    folder = (
        study_dir or Path.cwd() / "studies" / f"{study['name']}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    log = _progress(as_json)
    log(f"demo: {trials} trials of examples/mlp, 2 at a time, proposer {proposer}, in {folder}")
    demo_held_out(study, log)
    page = None
    if not no_page:
        from autoresearch.web.serve import BackgroundPage

        page = BackgroundPage([Path(folder)])  # the live study page while the demo runs
        log(f"watch it live: {page.url('studies/' + study['name'])}")
    try:
        result = run_study(study, folder, log=log)
    finally:
        if page is not None:
            page.stop()
    summary = get_study(result.study_dir)
    if as_json:
        _print_json(summary)
    else:
        _print_demo_summary(summary, result, page is not None, folder)
    if summary["state"] == "failed":  # as `run`: a demo whose study failed is not a success
        err.print(f"demo study failed: exit {STUDY_FAILED_EXIT}", highlight=False)
        raise typer.Exit(STUDY_FAILED_EXIT)


def _print_demo_summary(summary: dict[str, Any], result: Any, paged: bool, folder: Path) -> None:
    _print_summary(summary)
    best = summary.get("best")
    if best:
        out.print(
            Text.assemble(
                "\n",
                (f"best val_loss {best.get('label') or best['value']}", "bold green"),
                f" (trial {best['trial']}, {best['diff'] or 'base config'})",
            )
        )
    baseline = next((t.value for t in result.state.trials.values() if t.source == "baseline"), None)
    if best and baseline is not None and best["value"] is not None and baseline:
        gain = (baseline - best["value"]) / abs(baseline)
        shown = f"baseline val_loss {baseline:.4g} -> best {best['value']:.4g}"
        out.print(f"{shown} ({gain:.0%} lower)")
    fin = summary.get("final") or {}
    if fin.get("state") == "done" and fin.get("val_change_pct") is not None:
        out.print(demo_gains(fin))
    out.print(f"report: {summary['report']}")
    if summary.get("report"):
        from autoresearch.study.folder import PLOT_FILE

        out.print(f"plot:   {Path(summary['report']).with_name(PLOT_FILE)}")
    if paged:  # its page ended with it: how to open it again
        out.print(f"page:   stopped with the demo; reopen it: autoresearch serve {folder}")


def demo_gains(fin: dict[str, Any]) -> str:
    """The validation gain beside the held-out gain, from the final re-evaluation."""
    val, held = fin.get("val_change_pct"), fin.get("holdout_change_pct")
    line = f"final re-evaluation, trial {fin['winner']} vs the baseline: val_loss {val:+.1f}%"
    if held is not None:
        line += f", held-out test_loss {held:+.1f}% (gap {fin.get('gap_points', 0.0):.1f} points)"
        if not fin.get("holdout_gain"):
            line += ": no held-out gain"
    return line


def main() -> None:
    """`autoresearch`: --version, usage errors in the requested format, exit codes."""
    from air_skills.cli.usage import run_app

    run_app(app, "autoresearch")


if __name__ == "__main__":
    main()
