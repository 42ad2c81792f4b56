"""Optuna's TPE, used ask/tell-style on an in-memory study rebuilt from the history each call.

Finished trials are told their objective, pruned ones their learning curve, and running or
pending ones are added as RUNNING so that the constant-liar rule spreads a parallel batch out.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from typing import Any

from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.proposers.base import Proposal, ProposalRequest, ProposalResult, Proposer
from autoresearch.proposers.random_search import RandomProposer
from autoresearch.spec.space import clean_diff, config_key
from autoresearch.spec.study_schema import Study
from autoresearch.spec.study_sections import FloatParam, IntParam

MAX_ASKS_PER_PROPOSAL = 8


def distributions(study: Study) -> dict[str, Any]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, Any] = {}
    for key, p in study.search_space.items():
        if isinstance(p, FloatParam):
            out[key] = FloatDistribution(p.low, p.high, log=p.log)
        elif isinstance(p, IntParam):
            out[key] = IntDistribution(p.low, p.high, log=p.log)
        else:
            out[key] = CategoricalDistribution(p.values)
    return out


def _params(config: dict[str, Any], dists: dict[str, Any]) -> tuple[dict, dict]:
    """The trial's values that its distributions can hold (a base value may lie outside)."""
    params, used = {}, {}
    for key, dist in dists.items():
        if key not in config:
            continue
        value = config[key]
        try:
            if dist._contains(dist.to_internal_repr(value)):
                params[key], used[key] = value, dist
        except (ValueError, TypeError):
            continue
    return params, used


def default_startup(study: Study) -> int:
    return max(3, min(10, study.budget.trials // 5))


class TpeProposer(Proposer):
    name = "tpe"
    sampler_options: dict[str, Any] = {}  # TPESampler overrides (experiments), never written

    def __init__(self, seed: int = 0, n_startup_trials: int | None = None) -> None:
        self.seed = seed
        self.n_startup_trials = n_startup_trials

    @property
    def fallback(self) -> Proposer:
        return RandomProposer(self.seed)

    def _seed(self, request: ProposalRequest) -> int:
        text = f"tpe:{self.seed}:{len(request.trials)}:{len(request.pending)}"
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")

    def sampler(self, request: ProposalRequest) -> Any:
        """The Optuna sampler for this call, seeded from the history's length. Optuna's
        multivariate TPE as it comes: none of the variants tried on bench/search.py (a Sobol
        start, consider_endpoints, gamma, n_ei_candidates, GP, local moves, a GP-EI portfolio,
        re-asking near-repeats of tried configs) beat it on held-out seeds (bench/README.md)."""
        import optuna

        options = {
            "n_startup_trials": self.n_startup_trials or default_startup(request.study),
            "multivariate": True,
            "constant_liar": True,
            **self.sampler_options,
        }
        return optuna.samplers.TPESampler(seed=self._seed(request), **options)

    def build(self, request: ProposalRequest) -> Any:
        """The in-memory Optuna study that the history amounts to."""
        import optuna
        from optuna.trial import TrialState, create_trial

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = request.study
        dists = distributions(study)
        sampler = self.sampler(request)
        ostudy = optuna.create_study(direction=study.objective.direction, sampler=sampler)
        for t in request.trials:
            frozen = self._frozen(t, dists, create_trial, TrialState)
            if frozen is not None:
                ostudy.add_trial(frozen)
        for diff in request.pending:
            params, used = _params(study.config_for(diff), dists)
            ostudy.add_trial(
                create_trial(state=TrialState.RUNNING, params=params, distributions=used)
            )
        return ostudy

    @staticmethod
    def _frozen(t: Trial, dists: dict, create_trial: Any, state: Any) -> Any:
        params, used = _params(t.config, dists)
        if not params:
            return None
        if t.status == TrialStatus.SUCCEEDED and t.value is not None and math.isfinite(t.value):
            return create_trial(
                state=state.COMPLETE, params=params, distributions=used, value=t.value
            )
        if t.status == TrialStatus.PRUNED:
            curve = {int(s): float(v) for s, v in t.curve if math.isfinite(v)}
            if not curve and t.value is not None and t.steps is not None:
                curve = {int(t.steps): float(t.value)}
            return create_trial(
                state=state.PRUNED, params=params, distributions=used, intermediate_values=curve
            )
        if t.status in (TrialStatus.RUNNING, TrialStatus.PROPOSED):
            return create_trial(state=state.RUNNING, params=params, distributions=used)
        if t.status == TrialStatus.FAILED:
            return create_trial(state=state.FAIL, params=params, distributions=used)
        return None

    def propose(self, request: ProposalRequest) -> ProposalResult:
        from optuna.trial import TrialState

        study = request.study
        dists = distributions(study)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ostudy = self.build(request)
            taken = request.taken()
            out: list[Proposal] = []
            startup = self.n_startup_trials or default_startup(study)
            for _ in range(request.n):
                for _ask in range(MAX_ASKS_PER_PROPOSAL):
                    trial = ostudy.ask(dists)
                    diff = clean_diff(study, trial.params)
                    key = config_key(study, study.config_for(diff))
                    if key not in taken:
                        taken[key] = "this batch"
                        why = tpe_rationale(request, startup, trial.params, dists)
                        out.append(Proposal(diff=diff, source=self.name, rationale=why))
                        break
                    ostudy.tell(trial, state=TrialState.FAIL)
                else:
                    break
        reason = None if len(out) == request.n else "TPE kept proposing configs already tried"
        return ProposalResult(out, fallback_reason=reason)


def tpe_rationale(
    request: ProposalRequest,
    startup: int,
    params: dict[str, Any] | None = None,
    dists: dict[str, Any] | None = None,
) -> str:
    """Why TPE proposes what it does, in one line: exploration during its ``startup``
    trials (Optuna samples at random then), else the finished trial whose region this
    proposal (``params``) lies in, named by what it is to the study: the kept best, the
    lowest_seen and why it was not kept, or another (autoresearch/journal/best.py)."""
    from autoresearch.journal.best import lowest_trial, role

    direction = request.study.objective.direction
    done = [
        t
        for t in request.trials
        if t.status == TrialStatus.SUCCEEDED and t.value is not None and math.isfinite(t.value)
    ]
    if not done or len(request.trials) < startup:
        return (
            f"TPE startup: exploration (random, {len(request.trials)} of {startup} trials"
            " before TPE models the space)"
        )
    near = _nearest(done, params, dists) if params and dists else None
    if near is None:  # no point to place: the region of the best-scoring trials
        near = lowest_trial(done, direction)
    assert near is not None
    what = role(near, request.best_trial, lowest_trial(done, direction))
    diff = " ".join(f"{k}={v}" for k, v in near.diff.items())[:120] or "the base config"
    return (
        f"TPE: samples the region of trial {near.number} ({what}; {near.value:.5g};"
        f" {diff}), the finished trial nearest this proposal, from {len(done)} finished"
    )


def _nearest(done: list[Trial], params: dict[str, Any], dists: dict[str, Any]) -> Trial:
    """The finished trial whose parameters lie nearest ``params`` (each range scaled to 1,
    log ranges in log space; a categorical counts 0 or 1)."""

    def scaled(dist: Any, value: Any) -> float | None:
        low, high = getattr(dist, "low", None), getattr(dist, "high", None)
        if low is None or high is None or not isinstance(value, int | float):
            return None
        if getattr(dist, "log", False) and low > 0 and value > 0:
            low, high, value = math.log(low), math.log(high), math.log(value)
        return (float(value) - low) / ((high - low) or 1.0)

    def distance(t: Trial) -> float:
        theirs, _ = _params(t.config, dists)
        total = 0.0
        for key, dist in dists.items():
            a, b = params.get(key), theirs.get(key)
            sa, sb = scaled(dist, a), scaled(dist, b)
            total += (sa - sb) ** 2 if sa is not None and sb is not None else float(a != b)
        return total

    return min(done, key=lambda t: (distance(t), t.number))
