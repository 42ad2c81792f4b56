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

from autoresearch.journal import Trial
from autoresearch.space import check_diff, config_key
from autoresearch.study_schema import Study


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

    def taken(self) -> dict[str, str]:
        """Config keys already used, each with a label saying where."""
        out = {config_key(self.study, t.config): f"trial {t.number}" for t in self.trials}
        for i, diff in enumerate(self.pending, 1):
            out.setdefault(
                config_key(self.study, self.study.config_for(diff)),
                f"proposal {i} of this batch",
            )
        return out


@dataclass
class Proposal:
    diff: dict[str, Any]
    rationale: str = ""
    source: str = ""


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
        diff, problems = check_diff(request.study, p.diff, taken)
        if diff is None:
            events.append(
                (
                    "invalid_proposal",
                    {
                        "source": p.source or proposer.name,
                        "diff": p.diff,
                        "problems": problems,
                        "rationale": p.rationale,
                        "replaced_by": "fallback",
                    },
                )
            )
            continue
        taken[config_key(request.study, request.study.config_for(diff))] = (
            f"proposal {len(request.pending) + len(valid) + 1} of this batch"
        )
        valid.append(replace(p, diff=diff, source=p.source or proposer.name))
    missing = request.n - len(valid)
    fallback = proposer.fallback
    if missing > 0 and fallback is not None and result.stop_reason is None:
        sub = replace(
            request,
            n=missing,
            pending=request.pending + tuple(p.diff for p in valid),
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
