"""The report's section on the final selection by re-evaluation and the overfit gap."""

from __future__ import annotations

from typing import Any

from autoresearch.journal.journal import StudyState
from autoresearch.spec.study_schema import Study


def _ms(s: dict[str, Any] | None) -> str:
    """ "mean ± std (n)" of a stats object, or "-"."""
    if not s or s.get("mean") is None:
        return "-"
    return f"{s['mean']:.5g} ± {s['std']:.2g} ({s['n']})"


def final_lines(study: Study, state: StudyState) -> list[str]:
    """Markdown lines: the finalists' re-runs, the winner, and the gap (none when the study
    makes no final re-evaluation)."""
    if study.final_runs is None:
        return []
    lines = ["", "## Final selection", ""]
    done, started = state.final_done, state.final_started
    if done is None:
        lines.append(
            "Running: trials "
            + ", ".join(map(str, started.get("finalists", [])))
            + " and the baseline, re-run with fresh seeds."
            if started
            else "Not yet: the top configs are re-run with fresh seeds when the search ends."
        )
        return lines
    if not done.get("configs"):
        lines.append(f"None made: {done.get('reason') or 'nothing to re-evaluate'}.")
        return lines
    holdout = done.get("holdout_metric")
    seeds = ", ".join(map(str, (started or {}).get("seeds", [])))
    lines.append(
        f"The top configs within the noise floor of each other and the baseline, each re-run"
        f" with the same fresh seeds ({seeds}); the winner is the best mean of its re-runs on"
        f" `{study.objective.metric}`"
        + (f"; `{holdout}` is the held-out split, read only in these runs." if holdout else ".")
    )
    lines += ["", f"| config | search {study.objective.metric} | re-runs {study.objective.metric}"
              + (f" | held-out {holdout}" if holdout else "") + " |",
              "|---|---|---|" + ("---|" if holdout else "")]  # fmt: skip
    for c in done["configs"]:
        name = "baseline" if c["trial"] == 0 else f"trial {c['trial']}"
        if c["trial"] == done.get("winner"):
            name = f"**{name} (winner)**"
        row = f"| {name} | {_ms(c.get('search'))} | {_ms(c.get('val'))} |"
        lines.append(row + (f" {_ms(c.get('holdout'))} |" if holdout else ""))
    lines += ["", f"**{verdict_text(done)}**"]
    if done.get("reason"):
        lines.append(f"\n(ended early: {done['reason']})")
    return lines


def verdict_text(done: dict[str, Any]) -> str:
    """The one-line verdict: "val -12.3%, held-out -9.8%: gap 2.5 points" and its meaning."""
    verdict = done.get("verdict") or ""
    winner = done.get("winner")
    head = f"Winner: trial {winner}: " if winner is not None else ""
    return head + verdict
