"""The LLM proposer: Anthropic Messages tool use or OpenAI Chat Completions tool calls.

It renders the prompt (``llm_prompt``), asks for N diffs with a rationale each through a tool
whose schema is built from the search space (``llm_wire`` speaks to the provider), and checks
the answer. Invalid diffs and unreadable replies are sent back once with the problems; what is
still wrong after that is left to the fallback proposer by ``suggest``. Tokens and dollars of
every call are returned as journal events.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import prompts
from air_skills.errors import ProposerError
from autoresearch.proposers.base import (
    Proposal,
    ProposalRequest,
    ProposalResult,
    Proposer,
    check_proposal,
    short_json,
    trial_key,
)
from autoresearch.proposers.llm_prompt import render_prompts, replace_n, tool_schema
from autoresearch.proposers.llm_wire import (
    CALLS,
    CallFailed,
    Reply,
    followup,
    load_sdk,
    make_client,
)
from autoresearch.proposers.pricing import ModelPrice, price_for
from autoresearch.proposers.random_search import RandomProposer
from autoresearch.proposers.tpe import TpeProposer
from autoresearch.spec.study_sections import LlmProposerConfig

CHARS_PER_TOKEN = 3.5  # a conservative estimate for the pre-call budget check


class UnavailableLLM(Proposer):
    """An LLM proposer that cannot run here (its key or SDK is missing): it proposes nothing,
    so its fallback proposes every trial, and ``unavailable`` says why."""

    name = "llm"

    def __init__(self, config: LlmProposerConfig, why: Exception) -> None:
        self.config = config
        message = getattr(why, "message", str(why))
        self.unavailable = f"the llm proposer cannot run ({message}): {config.fallback} proposes"

    @property
    def fallback(self) -> Proposer:
        return _fallback(self.config)

    def propose(self, request: ProposalRequest) -> ProposalResult:
        return ProposalResult([], fallback_reason=self.unavailable)


def _fallback(config: LlmProposerConfig) -> Proposer:
    if config.fallback == "random":
        return RandomProposer(config.seed)
    return TpeProposer(config.seed)


class LLMProposer(Proposer):
    """Asks an LLM for diffs; needs the provider's API key in the environment."""

    name = "llm"

    def __init__(self, config: LlmProposerConfig) -> None:
        self.config = config
        self.provider = config.provider
        self.model = config.resolved_model
        self._sdk_module = load_sdk(self.provider)  # refuse now, not in the middle of a study
        self.api_key = self._api_key()
        override = (
            (config.price.input_usd_per_mtok, config.price.output_usd_per_mtok)
            if config.price
            else None
        )
        self.price: ModelPrice = price_for(self.provider, self.model, override, config.base_url)
        self._sdk: Any = None

    def _api_key(self) -> str:
        env = self.config.key_env
        key = os.environ.get(env, "").strip()
        if key:
            return key
        if self.config.base_url and not self.config.api_key_env:
            return "not-needed"  # a local OpenAI-compatible server usually takes any key
        raise ProposerError(
            f"{env} is not set: the llm proposer (provider {self.provider}) needs an API key",
            hint=f"export {env}=... (or set proposer.api_key_env), or use the offline proposer:"
            " `proposer: tpe`",
            code="missing-api-key",
            key=env,
        )

    @property
    def fallback(self) -> Proposer:
        return _fallback(self.config)

    # --- budget ---

    def estimate_usd(self, prompt_chars: int, n: int) -> float:
        out_tokens = min(self.config.max_tokens, 200 + 150 * n)
        return self.price.usd(math.ceil(prompt_chars / CHARS_PER_TOKEN), out_tokens)

    def _call_event(
        self, reply: Reply | None, purpose: str, error: CallFailed | None = None
    ) -> tuple[str, dict[str, Any]]:
        ev: dict[str, Any] = {
            "provider": self.provider,
            "model": self.model,
            "purpose": purpose,
            "ok": error is None,
            "input_tokens": 0,
            "output_tokens": 0,
            "usd": 0.0,
            "price_source": self.price.source,
        }
        if reply is not None:
            ev["input_tokens"] = reply.input_tokens + reply.cache_write_tokens
            ev["input_tokens"] += reply.cache_read_tokens
            ev["output_tokens"] = reply.output_tokens
            ev["usd"] = round(
                self.price.usd(
                    reply.input_tokens,
                    reply.output_tokens,
                    reply.cache_write_tokens,
                    reply.cache_read_tokens,
                ),
                8,
            )
        if error is not None:
            ev["error"] = error.message
            ev["status"] = error.status
        return "llm_call", ev

    # --- the round ---

    def propose(self, request: ProposalRequest) -> ProposalResult:
        system, user = render_prompts(request)
        tool = tool_schema(request.study, request.n, code=request.code is not None)
        events: list[tuple[str, dict[str, Any]]] = []
        left = request.llm_usd_left
        if left is not None and self.estimate_usd(len(system) + len(user), request.n) > left:
            return ProposalResult(events=events, stop_reason="budget:llm_usd")
        messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
        try:
            reply = self._call(system, messages, tool)
        except CallFailed as exc:
            events.append(self._call_event(None, request.purpose, exc))
            return self._failed(exc, events)
        events.append(self._call_event(reply, request.purpose))
        accepted, problems = self._accept(reply, request, [])
        missing = request.n - len(accepted)
        if missing <= 0:
            return ProposalResult(accepted[: request.n], events)
        for prob in problems:
            events.append(("invalid_proposal", {**prob, "attempt": 1, "replaced_by": "retry"}))
        spent = sum(ev["usd"] for kind, ev in events if kind == "llm_call")
        chars = len(system) + len(user) + len(json.dumps(reply.assistant))
        if left is not None and self.estimate_usd(chars, missing) > left - spent:
            return ProposalResult(
                accepted, events, fallback_reason="LLM budget too low for a retry"
            )
        problems_text = (
            "\n".join(
                f"- {short_json(p.get('diff'), 160) if p.get('diff') is not None else 'reply'}"
                + (" with its patch" if p.get("patch") else "")
                + ": "
                + "; ".join(p["problems"])
                for p in problems
            )
            or f"- you proposed {len(accepted)} valid trial(s); {request.n} were asked for"
        )
        retry_text = prompts.render("proposer_retry", problems=problems_text, n=missing)
        messages += [reply.assistant, followup(self.provider, reply, retry_text)]
        try:
            reply2 = self._call(system, messages, replace_n(tool, missing))
        except CallFailed as exc:
            events.append(self._call_event(None, request.purpose + ":retry", exc))
            result = self._failed(exc, events)
            result.proposals = accepted
            return result
        events.append(self._call_event(reply2, request.purpose + ":retry"))
        more, problems2 = self._accept(reply2, request, accepted, limit=missing)
        for prob in problems2:
            events.append(("invalid_proposal", {**prob, "attempt": 2, "replaced_by": "fallback"}))
        accepted += more
        reason = None
        if len(accepted) < request.n:
            reason = "LLM proposals still invalid after one retry"
        return ProposalResult(accepted[: request.n], events, fallback_reason=reason)

    def _failed(self, exc: CallFailed, events: list[tuple[str, dict[str, Any]]]) -> ProposalResult:
        if exc.fatal:
            raise ProposerError(
                f"the {self.provider} API refused the llm proposer: {exc.message}",
                hint=f"check {self.config.key_env} and proposer.model ({self.model});"
                " `proposer: tpe` runs offline",
                code="proposer-refused",
                status=exc.status,
            )
        return ProposalResult(
            events=events, fallback_reason=f"LLM call failed after retries: {exc.message}"
        )

    def _accept(
        self,
        reply: Reply,
        request: ProposalRequest,
        already: list[Proposal],
        limit: int | None = None,
    ) -> tuple[list[Proposal], list[dict[str, Any]]]:
        """(usable proposals, problems: one dict per rejected diff or unreadable reply)."""
        want = limit if limit is not None else request.n
        if reply.parse_error:
            return [], [{"diff": None, "problems": [reply.parse_error]}]
        payload = reply.payload
        items = payload.get("trials") if isinstance(payload, dict) else payload
        if not isinstance(items, list):
            return [], [
                {
                    "diff": None,
                    "problems": [
                        'the tool input must be {"trials": [{"diff": {...}, '
                        '"rationale": "..."}, ...]}'
                    ],
                }
            ]
        taken = request.taken()
        for i, p in enumerate(already, len(request.pending) + 1):
            key = trial_key(request.study, request.study.config_for(p.diff), p.code_key)
            taken[key] = f"proposal {i} of this batch"
        out: list[Proposal] = []
        problems: list[dict[str, Any]] = []
        for item in items:
            if len(out) >= want:
                break
            if not isinstance(item, dict) or "diff" not in item:
                problems.append({"diff": item, "problems": ["each trial needs a 'diff' object"]})
                continue
            rationale = item.get("rationale")
            rationale = rationale if isinstance(rationale, str) else ""
            asked = Proposal(
                diff=item["diff"],
                rationale=rationale.strip(),
                source=self.name,
                patch=item.get("patch") or None,
                parent=item.get("parent"),
            )
            checked, found = check_proposal(request, asked, taken)
            if checked is None:
                refused = {"patch": asked.patch, "parent": asked.parent}
                problems.append(
                    {"diff": item["diff"], "problems": found, "rationale": rationale}
                    | ({k: v for k, v in refused.items() if v is not None})
                )
                continue
            key = trial_key(request.study, request.study.config_for(checked.diff), checked.code_key)
            taken[key] = (
                f"proposal {len(request.pending) + len(already) + len(out) + 1} of this batch"
            )
            out.append(checked)
        return out, problems

    def _client(self) -> Any:
        if self._sdk is None:
            kwargs = {
                "api_key": self.api_key,
                "max_retries": self.config.max_retries,
                "timeout": self.config.timeout_s,
            }
            if self.config.base_url:
                kwargs["base_url"] = self.config.base_url
            self._sdk = make_client(self._sdk_module, self.provider, **kwargs)
        return self._sdk

    def _call(self, system: str, messages: list[dict[str, Any]], tool: dict[str, Any]) -> Reply:
        call = CALLS[self.provider]
        return call(
            self._sdk_module, self._client(), self.config, self.model, system, messages, tool
        )
