"""Proposers: ``llm`` (Anthropic or OpenAI), ``tpe`` (Optuna) and ``random``, one interface."""

from __future__ import annotations

from typing import Any

from autoresearch.proposers.base import (
    Proposal,
    ProposalRequest,
    ProposalResult,
    Proposer,
    suggest,
)
from autoresearch.proposers.random_search import RandomProposer
from autoresearch.proposers.tpe import TpeProposer

__all__ = [
    "Proposal",
    "ProposalRequest",
    "ProposalResult",
    "Proposer",
    "RandomProposer",
    "TpeProposer",
    "make_proposer",
    "suggest",
]


def make_proposer(config: Any) -> Proposer:
    """The proposer a study's ``proposer`` section names (an LLM one checks its key now).

    An LLM proposer that cannot work here (no API key, no SDK) is an error, unless the study
    names its ``fallback``: then the fallback proposes every trial, and ``unavailable`` says
    why (the loop and start_study show it as a warning)."""
    if config.type == "random":
        return RandomProposer(config.seed)
    if config.type == "tpe":
        return TpeProposer(config.seed, config.n_startup_trials)
    from air_skills.errors import AirError
    from autoresearch.proposers.llm import LLMProposer, UnavailableLLM

    try:
        return LLMProposer(config)
    except AirError as exc:
        if "fallback" not in config.model_fields_set:
            raise
        return UnavailableLLM(config, exc)
