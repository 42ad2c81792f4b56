"""``autoresearch demo``: a small study on the bundled MLP example, and its summary."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from air_skills import settings
from air_skills.errors import InvalidInput, NotFound
from autoresearch.cli.app import (
    STUDY_FAILED_EXIT,
    JsonOpt,
    _guard,
    _print_json,
    _print_summary,
    _progress,
    app,
    err,
    out,
)

DEMO_TRIALS = 12
# The demo's trials: a few CPU seconds each (300 steps), from a base whose lr is too low for so
# short a run, so that 12 trials show a clear win over the baseline on any machine, loaded too.
DEMO_BASE = {"steps": 300, "eval_every": 50, "lr": 1.0e-3}


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
