"""The LLM proposer against a local server speaking the Anthropic and OpenAI wire formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ar_helpers import small_study

from air_skills.errors import ProposerError
from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.proposers import ProposalRequest, suggest
from autoresearch.proposers.llm import LLMProposer
from autoresearch.study.study import Study, parse_study


def llm_study(provider: str, url: str | None, **proposer: Any) -> Study:
    pytest.importorskip(provider)  # the provider's SDK comes with the [llm] extra
    cfg = {"type": "llm", "provider": provider, "max_retries": 2, **proposer}
    if url:
        cfg["base_url"] = url
    return parse_study(
        small_study(
            proposer=cfg,
            program="Lower loss; x near 0.3 looked good.",
            noise={"repeats": 2},
            base_config={"x": 0.0, "y": 0.0, "seed": 0},
        )
    )


def run(study: Study, n: int = 2, trials: tuple = (), **kw: Any):
    proposer = LLMProposer(study.proposer)
    return suggest(proposer, ProposalRequest(study=study, trials=trials, n=n, **kw))


def kinds(result: Any) -> list[str]:
    return [k for k, _ in result.events]


def test_anthropic_valid_proposals(llm_server) -> None:
    study = llm_study("anthropic", llm_server.anthropic_url, model="claude-sonnet-4-6")
    llm_server.anthropic_tool(
        [
            {"diff": {"x": 0.3}, "rationale": "near the good x"},
            {"diff": {"x": 0.3, "y": 0.5}, "rationale": "and y"},
        ],
        input_tokens=2000,
        output_tokens=300,
    )
    done = Trial(0, {}, study.config_for({}), "baseline", status=TrialStatus.SUCCEEDED, value=0.45)
    result = run(study, trials=(done,), noise_floor=0.01, best_trial=0)
    assert [p.diff for p in result.proposals] == [{"x": 0.3}, {"x": 0.3, "y": 0.5}]
    assert [p.rationale for p in result.proposals] == ["near the good x", "and y"]
    assert {p.source for p in result.proposals} == {"llm"}
    call = dict(result.events)["llm_call"]
    assert call["input_tokens"] == 2000 and call["output_tokens"] == 300
    assert call["usd"] == pytest.approx((2000 * 3 + 300 * 15) / 1e6)
    (req,) = llm_server.requests
    assert req.path == "/v1/messages"
    assert "test-key" in (req.headers.get("x-api-key") or req.headers.get("authorization", ""))
    body = req.body
    assert body["model"] == "claude-sonnet-4-6"
    assert body["tool_choice"] == {"type": "tool", "name": "propose_trials"}
    schema = body["tools"][0]["input_schema"]["properties"]["trials"]
    assert schema["items"]["properties"]["diff"]["properties"]["x"] == {
        "type": "number",
        "minimum": -1.0,
        "maximum": 1.0,
    }
    prompt = body["messages"][0]["content"]
    for text in ("x near 0.3 looked good", "| 0* | (base) | SUCCEEDED | 0.45", "0.01"):
        assert text in prompt, text
    assert "propose_trials" in body["system"]


def test_openai_valid_proposals(llm_server) -> None:
    study = llm_study("openai", llm_server.openai_url, model="gpt-4.1-mini")
    llm_server.openai_tool([{"diff": {"y": -0.5}, "rationale": "try negative y"}])
    result = run(study, n=1)
    assert [p.diff for p in result.proposals] == [{"y": -0.5}]
    call = dict(result.events)["llm_call"]
    assert call["usd"] == pytest.approx((1000 * 0.4 + 200 * 1.6) / 1e6)
    (req,) = llm_server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers.get("authorization") == "Bearer test-key"
    assert req.body["tool_choice"] == {"type": "function", "function": {"name": "propose_trials"}}
    assert req.body["messages"][0]["role"] == "system"
    assert req.body["tools"][0]["function"]["name"] == "propose_trials"


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_invalid_diffs_go_back_once_then_fallback(llm_server, provider: str) -> None:
    url = llm_server.anthropic_url if provider == "anthropic" else llm_server.openai_url
    study = llm_study(provider, url)
    push = llm_server.anthropic_tool if provider == "anthropic" else llm_server.openai_tool
    push(
        [
            {"diff": {"x": 0.2}, "rationale": "ok"},
            {"diff": {"x": 7.0}, "rationale": "out of range"},
            {"diff": {"lr": 0.1}, "rationale": "unknown key"},
        ]
    )
    push(
        [
            {"diff": {"x": "big"}, "rationale": "wrong type"},
            {"diff": {"x": 0.2}, "rationale": "dup"},
        ]
    )
    result = run(study, n=3)
    assert len(result.proposals) == 3
    assert result.proposals[0].diff == {"x": 0.2} and result.proposals[0].source == "llm"
    assert [p.source for p in result.proposals[1:]] == ["fallback:tpe", "fallback:tpe"]
    invalid = [f for k, f in result.events if k == "invalid_proposal"]
    assert [(f["attempt"], f["replaced_by"]) for f in invalid] == [
        (1, "retry"), (1, "retry"), (2, "fallback"), (2, "fallback")
    ]  # fmt: skip
    assert "out of range" in invalid[0]["problems"][0]
    assert "unknown key 'lr'" in invalid[1]["problems"][0]
    assert "wrong type" in invalid[2]["problems"][0]
    assert "duplicate of proposal 1" in invalid[3]["problems"][0]
    assert kinds(result).count("llm_call") == 2 and "fallback" in kinds(result)
    retry = llm_server.requests[1].body["messages"]
    last = retry[-1]["content"]
    text = last if isinstance(last, str) else last[0]["content"]
    assert "x=7.0 is out of range" in text and "unknown key 'lr'" in text
    assert "Propose 2 replacement" in text
    if provider == "anthropic":
        assert retry[-1]["content"][0]["type"] == "tool_result"
        assert retry[-2]["role"] == "assistant"
    else:
        assert retry[-1]["role"] == "tool" and retry[-2]["tool_calls"]


def test_garbage_reply_body_falls_back(llm_server) -> None:
    study = llm_study("anthropic", llm_server.anthropic_url)
    llm_server.push(200, b"<html>this is not json")
    result = run(study, n=2)
    assert [p.source for p in result.proposals] == ["fallback:tpe", "fallback:tpe"]
    call = dict(result.events)["llm_call"]
    assert call["ok"] is False and "not valid JSON" in call["error"]


def test_text_instead_of_tool_is_sent_back(llm_server) -> None:
    study = llm_study("anthropic", llm_server.anthropic_url)
    llm_server.anthropic_text("I think you should try a higher learning rate.")
    llm_server.anthropic_tool([{"diff": {"x": 0.4}, "rationale": "now with the tool"}])
    result = run(study, n=1)
    assert [p.diff for p in result.proposals] == [{"x": 0.4}]
    (bad,) = [f for k, f in result.events if k == "invalid_proposal"]
    assert "did not call the tool" in bad["problems"][0]


def test_openai_arguments_not_json(llm_server) -> None:
    study = llm_study("openai", llm_server.openai_url)
    llm_server.openai_tool(None, raw_arguments='{"trials": [{"diff": {"x": 0.1')
    llm_server.openai_tool(None, raw_arguments="still not json")
    result = run(study, n=1)
    assert [p.source for p in result.proposals] == ["fallback:tpe"]
    invalid = [f for k, f in result.events if k == "invalid_proposal"]
    assert len(invalid) == 2 and all("not valid JSON" in f["problems"][0] for f in invalid)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_server_errors_are_retried_then_fall_back(llm_server, provider: str) -> None:
    url = llm_server.anthropic_url if provider == "anthropic" else llm_server.openai_url
    study = llm_study(provider, url, max_retries=2)
    for _ in range(3):
        if provider == "anthropic":
            llm_server.anthropic_error(500, "api_error", "internal", retry_after_ms="5")
        else:
            llm_server.openai_error(500, "internal", retry_after_ms="5")
    result = run(study, n=1)
    assert len(llm_server.requests) == 3  # the first try and 2 retries
    assert [p.source for p in result.proposals] == ["fallback:tpe"]
    call = dict(result.events)["llm_call"]
    assert call["ok"] is False and call["status"] == 500
    fallback = dict(result.events)["fallback"]
    assert "LLM call failed" in fallback["reason"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_rate_limit_is_retried_with_back_off(llm_server, provider: str) -> None:
    url = llm_server.anthropic_url if provider == "anthropic" else llm_server.openai_url
    study = llm_study(provider, url, max_retries=3)
    if provider == "anthropic":
        llm_server.anthropic_error(429, "rate_limit_error", "slow down", retry_after_ms="20")
        llm_server.anthropic_error(429, "rate_limit_error", "slow down", retry_after_ms="20")
        llm_server.anthropic_tool([{"diff": {"x": 0.5}, "rationale": "after the wait"}])
    else:
        llm_server.openai_error(429, "slow down", retry_after_ms="20")
        llm_server.openai_error(429, "slow down", retry_after_ms="20")
        llm_server.openai_tool([{"diff": {"x": 0.5}, "rationale": "after the wait"}])
    result = run(study, n=1)
    assert len(llm_server.requests) == 3
    assert [p.diff for p in result.proposals] == [{"x": 0.5}]
    assert [p.source for p in result.proposals] == ["llm"]


def test_rate_limit_that_never_ends_falls_back(llm_server) -> None:
    study = llm_study("anthropic", llm_server.anthropic_url, max_retries=1)
    for _ in range(2):
        llm_server.anthropic_error(429, "rate_limit_error", "slow down", retry_after_ms="5")
    result = run(study, n=1)
    assert [p.source for p in result.proposals] == ["fallback:tpe"]
    assert dict(result.events)["llm_call"]["status"] == 429


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_refused_key_is_an_error_not_a_fallback(llm_server, provider: str) -> None:
    url = llm_server.anthropic_url if provider == "anthropic" else llm_server.openai_url
    study = llm_study(provider, url)
    if provider == "anthropic":
        llm_server.anthropic_error(401, "authentication_error", "invalid x-api-key")
    else:
        llm_server.openai_error(401, "Incorrect API key provided")
    with pytest.raises(ProposerError) as info:
        run(study, n=1)
    assert info.value.code == "proposer-refused" and "401" in info.value.message
    assert info.value.hint


@pytest.mark.parametrize(
    "provider,variable", [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")]
)
def test_missing_key_names_the_variable(monkeypatch, provider: str, variable: str) -> None:
    monkeypatch.delenv(variable, raising=False)
    study = llm_study(provider, None)
    with pytest.raises(ProposerError) as info:
        LLMProposer(study.proposer)
    err = info.value
    assert err.code == "missing-api-key"
    assert variable in err.message and variable in err.hint and "tpe" in err.hint
    monkeypatch.setenv("MY_KEY", "")
    study = llm_study(provider, "http://127.0.0.1:9/v1", api_key_env="MY_KEY")
    with pytest.raises(ProposerError) as info:
        LLMProposer(study.proposer)
    assert "MY_KEY" in info.value.message


def test_llm_budget_is_checked_before_calling(llm_server) -> None:
    study = llm_study("anthropic", llm_server.anthropic_url)
    result = run(study, n=2, llm_usd_left=0.0001)
    assert result.proposals == [] and result.stop_reason == "budget:llm_usd"
    assert llm_server.requests == []


def test_unknown_model_on_a_local_server_costs_nothing(llm_server) -> None:
    study = llm_study("openai", llm_server.openai_url, model="qwen3-8b")
    llm_server.openai_tool([{"diff": {"x": 0.5}, "rationale": "r"}])
    result = run(study, n=1)
    call = dict(result.events)["llm_call"]
    assert call["usd"] == 0.0 and call["price_source"] == "local-server"


ABSENT_SDK = """
import json, sys
sys.modules[{provider!r}] = None  # as if the [llm] extra were not installed: import fails
from air_skills.errors import AirError
from autoresearch.loop.loop import StudyLoop
from autoresearch.study.study import parse_study
study = parse_study(json.loads({study!r}))
try:
    StudyLoop(study, {folder!r}, client=object()).run()
except AirError as exc:
    print(json.dumps({{"code": exc.code, "message": exc.message, "hint": exc.hint}}))
"""


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_study_without_the_sdk_refuses_at_its_start(tmp_path: Path, provider: str) -> None:
    study = small_study(proposer={"type": "llm", "provider": provider})
    folder = tmp_path / "study"
    code = ABSENT_SDK.format(provider=provider, study=json.dumps(study), folder=str(folder))
    env = {**os.environ, "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    err = json.loads(done.stdout.strip().splitlines()[-1])
    assert err["code"] == "missing-extra" and provider in err["message"]
    assert "pip install 'air-skills[llm]'" in err["hint"]
    assert not (folder / "journal.jsonl").exists()  # refused before anything was written
