"""Proposer contract: every proposer passes the same tests (Optuna's shared-suite habit)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ar_helpers import small_study
from llm_server import schema_following

from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.proposers import (
    ProposalRequest,
    Proposer,
    RandomProposer,
    TpeProposer,
    suggest,
)
from autoresearch.proposers.llm import LLMProposer
from autoresearch.spec.space import check_diff, config_key
from autoresearch.study.study import Study, parse_study

SPACE = {
    "x": {"type": "float", "low": -1.0, "high": 1.0},
    "n": {"type": "int", "low": 1, "high": 8, "log": True},
    "act": {"type": "choice", "values": ["relu", "gelu", "tanh"]},
}
BASE = {"x": 0.0, "n": 2, "act": "relu", "steps": 10}


def make_study(**overrides: Any) -> Study:
    return parse_study(small_study(search_space=SPACE, base_config=BASE, **overrides))


def trial(
    study: Study, n: int, diff: dict, status: TrialStatus, value: float | None = None, **kw: Any
) -> Trial:
    return Trial(number=n, diff=diff, config=study.config_for(diff), source="test",
                 status=status, value=value, **kw)  # fmt: skip


def history(study: Study) -> tuple[Trial, ...]:
    S = TrialStatus
    return (
        trial(study, 0, {}, S.SUCCEEDED, 0.45),
        trial(study, 1, {"x": 0.3, "n": 4}, S.SUCCEEDED, 0.10),
        trial(study, 2, {"x": -0.9}, S.FAILED, failure="RuntimeError: boom"),
        trial(study, 3, {"x": 0.9, "act": "tanh"}, S.PRUNED, 1.3, curve=[[0, 2.0], [1, 1.3]]),
        trial(study, 4, {"x": 0.5, "n": 8, "act": "gelu"}, S.RUNNING),
        trial(study, 5, {"x": 0.25, "n": 3}, S.SUCCEEDED, 0.2),
    )


class ProposerContract:
    """Subclass and provide the ``proposer`` fixture (a function study -> Proposer)."""

    @pytest.fixture
    def proposer(self) -> Any:
        raise NotImplementedError

    def _check(self, study: Study, request: ProposalRequest, result: Any) -> None:
        taken = request.taken()
        for p in result.proposals:
            diff, problems = check_diff(study, p.diff, taken)
            assert problems == [], (p, problems)
            taken[config_key(study, study.config_for(diff))] = "batch"
            assert p.source

    def test_empty_history_gives_n_valid_distinct(self, proposer: Any) -> None:
        study = make_study()
        request = ProposalRequest(study=study, trials=(), n=4)
        result = suggest(proposer(study), request)
        assert len(result.proposals) == 4
        self._check(study, request, result)

    def test_history_is_never_repeated(self, proposer: Any) -> None:
        study = make_study()
        request = ProposalRequest(study=study, trials=history(study), n=3, best_trial=1)
        result = suggest(proposer(study), request)
        assert len(result.proposals) == 3
        self._check(study, request, result)

    def test_pending_batch_is_not_repeated(self, proposer: Any) -> None:
        study = make_study()
        pending = ({"x": 0.1}, {"x": 0.2, "act": "gelu"})
        request = ProposalRequest(study=study, trials=history(study), n=2, pending=pending)
        result = suggest(proposer(study), request)
        assert len(result.proposals) == 2
        self._check(study, request, result)

    def test_no_hidden_state(self, proposer: Any) -> None:
        study = make_study()
        request = ProposalRequest(study=study, trials=history(study), n=2)
        first = suggest(proposer(study), request)
        again = suggest(proposer(study), request)  # a fresh proposer: a resumed loop
        p = proposer(study)
        suggest(p, ProposalRequest(study=study, trials=(), n=1))  # other work in between
        third = suggest(p, request)
        diffs = [x.diff for x in first.proposals]
        assert diffs == [x.diff for x in again.proposals] == [x.diff for x in third.proposals]

    def test_request_is_not_changed(self, proposer: Any) -> None:
        study = make_study()
        trials = history(study)
        before = copy.deepcopy([t.to_dict() for t in trials])
        suggest(proposer(study), ProposalRequest(study=study, trials=trials, n=2))
        assert [t.to_dict() for t in trials] == before

    def test_exhausted_space_gives_what_is_left(self, proposer: Any) -> None:
        study = parse_study(
            small_study(
                search_space={
                    "a": {"type": "choice", "values": [1, 2]},
                    "b": {"type": "choice", "values": ["u", "v"]},
                },
                base_config={"a": 1, "b": "u"},
            )
        )
        S = TrialStatus
        used = (
            trial(study, 0, {}, S.SUCCEEDED, 1.0),
            trial(study, 1, {"a": 2}, S.SUCCEEDED, 0.5),
            trial(study, 2, {"b": "v"}, S.FAILED),
        )
        result = suggest(proposer(study), ProposalRequest(study=study, trials=used, n=3))
        assert [p.diff for p in result.proposals] == [{"a": 2, "b": "v"}]

    def test_maximize(self, proposer: Any) -> None:
        study = make_study(objective={"metric": "acc", "direction": "maximize"})
        request = ProposalRequest(study=study, trials=history(study), n=2)
        result = suggest(proposer(study), request)
        assert len(result.proposals) == 2
        self._check(study, request, result)


class TestRandomProposer(ProposerContract):
    @pytest.fixture
    def proposer(self) -> Any:
        return lambda study: RandomProposer(seed=3)


class TestTpeProposer(ProposerContract):
    @pytest.fixture
    def proposer(self) -> Any:
        return lambda study: TpeProposer(seed=3, n_startup_trials=2)


class TestLlmAnthropicProposer(ProposerContract):
    @pytest.fixture
    def proposer(self, llm_server: Any) -> Any:
        pytest.importorskip("anthropic")  # the [llm] extra
        llm_server.responder = schema_following

        def make(study: Study) -> Proposer:
            cfg = study.model_copy(
                update={"proposer": parse_study(
                    small_study(proposer={"type": "llm", "base_url": llm_server.anthropic_url})
                ).proposer}
            ).proposer  # fmt: skip
            return LLMProposer(cfg)

        return make


class TestLlmOpenAIProposer(ProposerContract):
    @pytest.fixture
    def proposer(self, llm_server: Any) -> Any:
        pytest.importorskip("openai")  # the [llm] extra
        llm_server.responder = schema_following

        def make(study: Study) -> Proposer:
            cfg = parse_study(
                small_study(
                    proposer={
                        "type": "llm",
                        "provider": "openai",
                        "base_url": llm_server.openai_url,
                    }
                )
            ).proposer
            return LLMProposer(cfg)

        return make


def test_tpe_uses_the_history() -> None:
    """Given 30 scored trials, TPE proposes far closer to the optimum than random search."""
    import random

    study = parse_study(
        small_study(
            search_space={
                "x": {"type": "float", "low": -1.0, "high": 1.0},
                "y": {"type": "float", "low": -1.0, "high": 1.0},
            },
        )
    )
    rng = random.Random(1)
    points = [(rng.uniform(-1, 1), rng.uniform(-1, 1)) for _ in range(30)]

    def loss(x: float, y: float) -> float:
        return (x - 0.7) ** 2 + (y + 0.2) ** 2

    trials = tuple(
        trial(study, i, {"x": x, "y": y}, TrialStatus.SUCCEEDED, loss(x, y))
        for i, (x, y) in enumerate(points)
    )

    def mean_loss(proposer: Proposer) -> float:
        result = suggest(proposer, ProposalRequest(study=study, trials=trials, n=8))
        return sum(loss(p.diff["x"], p.diff["y"]) for p in result.proposals) / 8

    assert mean_loss(TpeProposer(seed=0)) < 0.5 * mean_loss(RandomProposer(seed=0))
