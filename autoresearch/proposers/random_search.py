"""Random search: every value drawn independently (log-uniform where the space says ``log``)."""

from __future__ import annotations

import random

from autoresearch.proposers.base import Proposal, ProposalRequest, ProposalResult, Proposer
from autoresearch.spec.space import clean_diff, config_key, sample_value

MAX_DRAWS = 200


class RandomProposer(Proposer):
    """Seeded by (seed, history length): the same history gives the same proposals."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, request: ProposalRequest) -> ProposalResult:
        study = request.study
        rng = random.Random(f"random:{self.seed}:{len(request.trials)}:{len(request.pending)}")
        taken = request.taken()
        out: list[Proposal] = []
        for _ in range(request.n):
            for _draw in range(MAX_DRAWS):
                params = {k: sample_value(p, rng) for k, p in study.search_space.items()}
                diff = clean_diff(study, params)
                key = config_key(study, study.config_for(diff))
                if key not in taken:
                    taken[key] = "this batch"
                    why = "random: exploration (a uniform draw from the search space)"
                    out.append(Proposal(diff=diff, source=self.name, rationale=why))
                    break
            else:
                return ProposalResult(out, fallback_reason="no unused config found")
        return ProposalResult(out)
