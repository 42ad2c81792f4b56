"""The ``autoresearch`` Typer app: its consoles, the error guard, and the study summary table."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import wraps
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from air_skills.errors import AirError, render_json, render_text

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
