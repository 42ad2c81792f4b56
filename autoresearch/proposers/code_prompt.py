"""The code part of the LLM proposer's prompt: the editable files within ``code.context_kb``
(a file that does not fit as an outline plus the parts earlier patches touched), the best
trial's patch, and how to answer with a patch."""

from __future__ import annotations

import re
from typing import Any

import prompts
from autoresearch.code.code_check import chain_of
from autoresearch.code.code_diff import summary_text, touched_lines
from autoresearch.journal.journal import Trial

OUTLINE = re.compile(r"^\s*(def |class |async def |@|[A-Z_][A-Z0-9_]* = )")
AROUND = 6  # lines of context shown around a touched range
BEST_PATCH_CHARS = 6000


def _numbered(lines: list[str], first: int, last: int) -> str:
    return "".join(f"{i:5d}| {lines[i - 1]}" for i in range(first, last + 1))


def outline(path: str, text: str, ranges: list[tuple[int, int]], budget: int) -> str:
    """A file too big for the prompt: its definitions, and the lines patches touched."""
    lines = text.splitlines(keepends=True)
    shown = [f"{i:5d}| {ln}" for i, ln in enumerate(lines, 1) if OUTLINE.match(ln)]
    parts = [f"(outline: {len(lines)} lines; definitions only)\n", "".join(shown)]
    for first, last in sorted(set(ranges)):
        lo, hi = max(1, first - AROUND), min(len(lines), last + AROUND)
        if lo <= hi:
            parts.append(f"... lines {lo}-{hi} (touched by earlier patches):\n")
            parts.append(_numbered(lines, lo, hi))
    out = "".join(parts)
    return out if len(out) <= budget else out[:budget] + "\n(cut at code.context_kb)\n"


def editable_files(code: Any, trials: tuple[Trial, ...]) -> str:
    """The editable files of the base, whole while ``context_kb`` lasts."""
    budget = code.section.context_kb * 1024
    touched: dict[str, list[tuple[int, int]]] = {}
    for t in trials:
        for path, ranges in touched_lines(t.patch or "").items():
            touched.setdefault(path, []).extend(ranges)
    blocks = []
    files = sorted(code.editable, key=lambda p: (p not in touched, p))
    for path in files:
        data = code.read(path) or b""
        text = data.decode("utf-8", "replace")
        if len(text) + 200 <= budget:
            body = text
        elif budget > 400:
            body = outline(path, text, touched.get(path, []), budget - 200)
        else:
            blocks.append(f"### {path}\n(not shown: code.context_kb is spent)\n")
            continue
        budget -= len(body) + 200
        blocks.append(f"### {path}\n```\n{body}{'' if body.endswith(chr(10)) else chr(10)}```\n")
    return "\n".join(blocks)


def best_patch(trials: tuple[Trial, ...], best: int | None) -> str:
    """The best trial's code as patches from the base (root first), or a note."""
    history = {t.number: t for t in trials}
    chain = chain_of(history, best)
    if best is None or not chain:
        return "(the best trial runs the base code: no patch yet)"
    text = "\n".join(chain)
    if len(text) > BEST_PATCH_CHARS:
        text = text[:BEST_PATCH_CHARS] + "\n(cut)\n"
    return f"trial {best}'s code, as patches from the base:\n```diff\n{text}\n```"


def patch_note(t: Trial) -> str:
    """A history row's code column: ``train.py +3/-1 on #4``."""
    if not t.patch:
        return f"(code of #{t.parent})" if t.parent is not None else ""
    on = f" on #{t.parent}" if t.parent is not None else ""
    return summary_text(t.patch_summary) + on


def code_section(code: Any, trials: tuple[Trial, ...], best: int | None) -> str:
    if code is None:
        return ""
    protected = ", ".join(sorted(code.protected)) or "(none)"
    return prompts.render(
        "proposer_code",
        editable=", ".join(code.editable),
        protected=protected,
        files=editable_files(code, trials),
        best=best_patch(trials, best),
    )
