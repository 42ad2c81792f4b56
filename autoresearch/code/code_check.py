"""A proposed patch checked before anything runs: size, files, its parent, apply, compile.

A patch must be text no bigger than ``code.max_patch_kb``, touch only editable files and no
protected one, apply to its parent's code (the base, or the code of the trial it names), and
leave every changed Python file compiling. Every problem is a line for the LLM's retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from air_skills.errors import InvalidSpec
from air_skills.runtime.code.patch import parse_patch
from autoresearch.code.code_base import CodeBase, matches
from autoresearch.code.code_diff import summarize
from autoresearch.journal.journal import Trial, TrialStatus


@dataclass
class CheckedPatch:
    """A patch that passed (``problems`` empty) or why not."""

    patch: str | None
    parent: int | None
    problems: list[str]
    summary: dict[str, Any] | None = None


def chain_of(trials: Mapping[int, Trial], number: int | None) -> list[str]:
    """The patches from the base to trial ``number``'s code, root first."""
    out: list[str] = []
    seen: set[int] = set()
    while number is not None and number in trials and number not in seen:
        seen.add(number)
        t = trials[number]
        if t.patch:
            out.append(t.patch)
        number = t.parent
    return out[::-1]


def _parent_problem(trials: Mapping[int, Trial], parent: Any) -> str | None:
    if parent is None:
        return None
    if isinstance(parent, bool) or not isinstance(parent, int):
        return f"parent must be a trial number (an integer), not {parent!r}"
    t = trials.get(parent)
    if t is None:
        return f"parent {parent}: no such trial (trials so far: 0..{max(trials, default=-1)})"
    if t.status != TrialStatus.SUCCEEDED or t.failure_kind == "tampered":
        return f"parent {parent} did not succeed ({t.status.value}); build on a trial that did"
    return None


def check_patch(
    base: CodeBase, trials: Mapping[int, Trial], patch: Any, parent: Any
) -> CheckedPatch:
    """Check one proposed ``patch`` on ``parent`` (see the module docstring)."""
    problems: list[str] = []
    found = _parent_problem(trials, parent)
    if found:
        return CheckedPatch(None, None, [found])
    if patch is None or patch == "":
        return CheckedPatch(None, parent, [])
    if not isinstance(patch, str):
        kind = type(patch).__name__
        return CheckedPatch(None, parent, [f"patch must be a unified diff (text), not {kind}"])
    limit = base.section.max_patch_kb * 1024
    if len(patch.encode()) > limit:
        return CheckedPatch(None, parent, [
            f"the patch is {len(patch.encode()) // 1024} KB, over code.max_patch_kb"
            f" ({base.section.max_patch_kb} KB): make a smaller change"])  # fmt: skip
    try:
        files = parse_patch(patch)
    except InvalidSpec as exc:
        return CheckedPatch(None, parent, [_reason(exc)])
    for fp in files:
        for path in {fp.old_path, fp.new_path} - {None}:
            assert path is not None
            if matches(base.section.protected, path) or path in base.protected:
                problems.append(f"{path} is protected (the evaluator's side): it may never change")
            elif not matches(base.section.editable, path):
                problems.append(f"{path} is not editable; editable: {', '.join(base.editable)}")
    if problems:
        return CheckedPatch(None, parent, sorted(set(problems)))
    try:
        chain = chain_of(trials, parent)
        changed = base.apply_chain([*chain, patch])
    except InvalidSpec as exc:
        return CheckedPatch(None, parent, [_reason(exc)])
    for path, data in sorted(changed.items()):
        if data is None or not path.endswith(".py") or path not in {f.name for f in files}:
            continue
        try:
            compile(data, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            problems.append(
                f"{path} does not compile after the patch: line {exc.lineno}: {exc.msg}"
            )
        except ValueError as exc:  # NUL bytes
            problems.append(f"{path} does not compile after the patch: {exc}")
    if problems:
        return CheckedPatch(None, parent, problems)
    return CheckedPatch(patch, parent, [], summarize(patch))


def _reason(exc: InvalidSpec) -> str:
    text = exc.message
    prefix = "patch refused, nothing was launched: "
    return text[len(prefix) :] if text.startswith(prefix) else text
