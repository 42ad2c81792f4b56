"""The proposer interface: the whole history in, N config diffs out, no hidden state.

``suggest`` wraps any proposer: it checks every diff against the search space and the history
(unknown key, wrong type, out of range, duplicate), and replaces what is still invalid by the
proposer's fallback. Both the invalid diffs and the replacements are returned as journal events.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any

from autoresearch.code.code_base import patch_digest
from autoresearch.journal.journal import Trial
from autoresearch.spec.space import check_diff, config_key
from autoresearch.spec.study_schema import Study


@dataclass(frozen=True)
class ProposalRequest:
    """Everything a proposer may use. A proposer keeps nothing between calls."""

    study: Study
    trials: tuple[Trial, ...]  # the whole history, by trial number (running ones included)
    n: int  # how many diffs are wanted
    pending: tuple[dict[str, Any], ...] = ()  # diffs already chosen in this batch
    noise_floor: float | None = None
    best_trial: int | None = None
    budget_left: dict[str, Any] = field(default_factory=dict)
    llm_usd_left: float | None = None
    purpose: str = "propose"  # propose | suggest
    code: Any = None  # a code study's CodeBase: proposals may carry patches
    pending_code: tuple[str, ...] = ()  # the patch digests of ``pending``, in order
    notes: tuple[str, ...] = ()  # steer_study's notes, read from the next call on
    pins: dict[str, Any] = field(default_factory=dict)  # parameters steer_study pinned

    def taken(self) -> dict[str, str]:
        """Trial keys (config and code) already used, each with a label saying where."""
        out = {
            trial_key(self.study, t.config, patch_digest(t.patch, t.parent)): f"trial {t.number}"
            for t in self.trials
            if t.source != "confirm"
        }
        codes = self.pending_code or ("",) * len(self.pending)
        for i, (diff, code) in enumerate(zip(self.pending, codes, strict=False), 1):
            out.setdefault(
                trial_key(self.study, self.study.config_for(diff), code),
                f"proposal {i} of this batch",
            )
        return out

    def history(self) -> dict[int, Trial]:
        return {t.number: t for t in self.trials}


@dataclass
class Proposal:
    diff: dict[str, Any]
    rationale: str = ""
    source: str = ""
    patch: str | None = None  # a unified diff against the parent's code (code studies)
    parent: int | None = None  # the trial whose code the patch builds on (None: the base)
    patch_summary: dict[str, Any] | None = None

    @property
    def code_key(self) -> str:
        return patch_digest(self.patch, self.parent)


def trial_key(study: Study, config: dict[str, Any], code: str) -> str:
    """What makes two trials the same: their search-space values, and their code."""
    key = config_key(study, config)
    return f"{key}|{code}" if code else key


def check_proposal(
    request: ProposalRequest, p: Proposal, taken: dict[str, str]
) -> tuple[Proposal | None, list[str]]:
    """(the proposal normalised, or None; problems): its diff, its patch, no duplicate."""
    diff, problems = check_diff(request.study, p.diff, {})
    if diff is None:
        return None, problems
    patch, parent, summary = None, None, None
    if p.patch is not None or p.parent is not None:
        if request.code is None:
            return None, ["this study has no `code` section: propose config diffs only"]
        from autoresearch.code.code_check import check_patch

        checked = check_patch(request.code, request.history(), p.patch, p.parent)
        if checked.problems:
            return None, checked.problems
        patch, parent, summary = checked.patch, checked.parent, checked.summary
    out = replace(p, diff=diff, patch=patch, parent=parent, patch_summary=summary)
    key = trial_key(request.study, request.study.config_for(diff), out.code_key)
    if key in taken:
        return None, [f"duplicate of {taken[key]}: {json.dumps(diff, sort_keys=True)}"
                      + (" with the same patch" if out.patch else "")]  # fmt: skip
    return out, []


@dataclass
class ProposalResult:
    proposals: list[Proposal] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # for the journal
    stop_reason: str | None = None  # e.g. "budget:llm_usd": propose nothing more
    fallback_reason: str | None = None  # why fewer than n came back


class Proposer(ABC):
    """Proposes config diffs from the whole history; subclasses implement ``propose``."""

    name: str = "proposer"

    @property
    def fallback(self) -> Proposer | None:
        """Fills in when this proposer returns fewer valid diffs than asked for."""
        return None

    @abstractmethod
    def propose(self, request: ProposalRequest) -> ProposalResult:
        """Up to ``request.n`` diffs. Invalid ones are allowed: ``suggest`` checks them."""


def suggest(proposer: Proposer, request: ProposalRequest) -> ProposalResult:
    """``request.n`` valid, distinct diffs (fewer only when the space or a budget runs out)."""
    result = proposer.propose(request)
    taken = request.taken()
    valid: list[Proposal] = []
    events = list(result.events)
    for p in result.proposals:
        if len(valid) >= request.n:
            break
        checked, problems = check_proposal(request, p, taken)
        if checked is None:
            refused = {"patch": p.patch, "parent": p.parent} if p.patch or p.parent else {}
            events.append(
                (
                    "invalid_proposal",
                    {
                        "source": p.source or proposer.name,
                        "diff": p.diff,
                        "problems": problems,
                        "rationale": p.rationale,
                        "replaced_by": "fallback",
                        **refused,
                    },
                )
            )
            continue
        taken[
            trial_key(request.study, request.study.config_for(checked.diff), checked.code_key)
        ] = f"proposal {len(request.pending) + len(valid) + 1} of this batch"
        valid.append(replace(checked, source=p.source or proposer.name))
    missing = request.n - len(valid)
    fallback = proposer.fallback
    if missing > 0 and fallback is not None and result.stop_reason is None:
        sub = replace(
            request,
            n=missing,
            pending=request.pending + tuple(p.diff for p in valid),
            pending_code=(request.pending_code or ("",) * len(request.pending))
            + tuple(p.code_key for p in valid),
        )
        filled = suggest(fallback, sub)
        events += filled.events
        for p in filled.proposals:
            if not p.source.startswith("fallback:"):
                p.source = f"fallback:{p.source or fallback.name}"
            valid.append(p)
        if filled.proposals:
            events.append(
                (
                    "fallback",
                    {
                        "count": len(filled.proposals),
                        "source": fallback.name,
                        "replacing": proposer.name,
                        "reason": result.fallback_reason or "too few valid proposals",
                    },
                )
            )
    return ProposalResult(
        proposals=valid,
        events=events,
        stop_reason=result.stop_reason,
        fallback_reason=result.fallback_reason,
    )


def short_json(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
