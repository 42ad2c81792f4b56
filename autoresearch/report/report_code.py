"""The code parts of a study report: the base snapshot, the winning patch inline, the lineage
of trials (which built on which) and the near-misses."""

from __future__ import annotations

from typing import Any

from autoresearch.code.code_check import chain_of
from autoresearch.code.code_diff import summary_text
from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.spec.study_schema import Study

NEAR_MISSES = 5
PATCH_CHARS = 12_000


def value_text(t: Trial) -> str:
    """A trial's objective; mean ± std over its runs for a confirmed trial."""
    c = t.confirmed
    if c and c.get("n"):
        return f"{c['mean']:.5g} ± {c['std']:.2g} (n={c['n']})"
    return "" if t.value is None else f"{t.value:.5g}"


def _label(t: Trial, best: int | None) -> str:
    mark = " **best**" if t.number == best else ""
    what = summary_text(t.patch_summary) or "config only"
    diff = ", ".join(f"{k}={v}" for k, v in t.diff.items())
    return (
        f"#{t.number} [{t.decision or t.status.value.lower()}] {value_text(t) or '-'}"
        f" · {what}{' · ' + diff if diff else ''}{mark}"
    )


def lineage(state: StudyState) -> list[str]:
    """The trials as a tree from the base: a child applies its patch to its parent's code."""
    trials = [t for t in state.ordered() if t.is_candidate]
    children: dict[int | None, list[Trial]] = {}
    for t in trials:
        children.setdefault(t.parent, []).append(t)
    lines = ["- base" + (" (trial 0)" if 0 in state.trials else "")]

    def walk(parent: int | None, depth: int) -> None:
        for t in children.get(parent, []):
            lines.append("  " * depth + "- " + _label(t, state.best_trial))
            walk(t.number, depth + 1)

    walk(None, 1)
    return lines


def near_misses(study: Study, state: StudyState) -> list[Trial]:
    """The best discarded candidates, best first."""
    out = [t for t in state.ordered() if t.is_candidate and t.decision == "discard"
           and t.value is not None]  # fmt: skip
    sign = 1 if study.objective.direction == "minimize" else -1
    return sorted(out, key=lambda t: sign * (t.value or 0.0))[:NEAR_MISSES]


def code_lines(study: Study, state: StudyState) -> list[str]:
    """The report's code sections (none for a config-only study)."""
    base: dict[str, Any] | None = state.code_base
    if study.code is None or base is None:
        return []
    where = f"commit `{base['commit'][:12]}`" if base.get("commit") else base.get("mode", "")
    lines = [
        "",
        "## Code",
        "",
        f"- **Base snapshot:** `{base['digest'][:12]}` of `{base['root']}` ({where}"
        + (", dirty" if base.get("dirty") else "")
        + ")",
        f"- **Editable:** {', '.join(base.get('editable', []))}",
        f"- **Protected:** {', '.join(base.get('protected', {})) or '(none)'}",
    ]
    if state.tampered:
        lines.append(
            "- **Tampered (not counted):** "
            + "; ".join(f"#{n}: {', '.join(f)}" for n, f in sorted(state.tampered.items()))
        )
    chain = chain_of(state.trials, state.best_trial)
    lines += ["", "### Winning patch", ""]
    if not chain:
        lines.append("(none: the best trial runs the base code)")
    else:
        text = "\n".join(chain)
        if len(text) > PATCH_CHARS:
            text = text[:PATCH_CHARS] + "\n... (cut; the journal holds it whole)"
        lines += [f"Trial {state.best_trial}'s code, as patches from the base:", "", "```diff",
                  text.rstrip("\n"), "```"]  # fmt: skip
    lines += ["", "## Lineage", ""] + lineage(state)
    misses = near_misses(study, state)
    if misses:
        lines += ["", "## Near-misses", ""]
        lines += ["- " + _label(t, None) + (f": {t.rationale[:120]}" if t.rationale else "")
                  for t in misses]  # fmt: skip
    failed = [t for t in state.ordered() if t.status == TrialStatus.FAILED and t.patch]
    if failed:
        lines += ["", f"{len(failed)} patched trial(s) failed; their patches are in the journal."]
    return lines
