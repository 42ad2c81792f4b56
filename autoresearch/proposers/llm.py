"""The LLM proposer: Anthropic Messages tool use or OpenAI Chat Completions tool calls.

It renders the templates in ``prompts/`` (research notes, search space, noise floor, budget
left and a compact history table), asks for N diffs with a rationale each through a tool whose
schema is built from the search space, and checks the answer. Invalid diffs and unreadable
replies are sent back once with the problems; what is still wrong after that is left to the
fallback proposer by ``suggest``. Tokens and dollars of every call are returned as journal
events. HTTP retries (429, 5xx, connection errors) with back-off are the SDKs' own.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import prompts
from air_skills.errors import ProposerError
from autoresearch.journal import TrialStatus
from autoresearch.pricing import ModelPrice, price_for
from autoresearch.proposers.base import (
    Proposal,
    ProposalRequest,
    ProposalResult,
    Proposer,
    short_json,
)
from autoresearch.proposers.random_search import RandomProposer
from autoresearch.proposers.tpe import TpeProposer
from autoresearch.space import check_diff, config_key
from autoresearch.study import FloatParam, IntParam, LlmProposerConfig, Study

TOOL_NAME = "propose_trials"
TOOL_DESCRIPTION = (
    "Submit the next trials to run, each as a diff from the base config with a short rationale."
)
MAX_HISTORY_ROWS = 80
CHARS_PER_TOKEN = 3.5  # a conservative estimate for the pre-call budget check


@dataclass
class Reply:
    """One provider answer, reduced to what the loop needs."""

    payload: Any  # the tool's arguments (parsed JSON), or None
    parse_error: str | None
    assistant: dict[str, Any]  # the assistant message, to send back on a retry
    tool_call_id: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0


class CallFailed(Exception):
    def __init__(self, message: str, *, fatal: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fatal = fatal
        self.status = status


# --- prompt rendering --------------------------------------------------------------------------


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    return json.dumps(value) if not isinstance(value, str) else value


def describe_space(study: Study) -> str:
    lines = []
    for key, p in study.search_space.items():
        base = f" (base: {_num(study.base_config[key])})" if key in study.base_config else ""
        if isinstance(p, FloatParam):
            scale = ", log scale" if p.log else ""
            lines.append(f"- {key}: number in [{_num(p.low)}, {_num(p.high)}]{scale}{base}")
        elif isinstance(p, IntParam):
            scale = ", log scale" if p.log else ""
            lines.append(f"- {key}: integer in [{p.low}, {p.high}]{scale}{base}")
        else:
            lines.append(f"- {key}: one of {json.dumps(p.values)}{base}")
    return "\n".join(lines)


def curve_summary(curve: list[list[float]], points: int = 5) -> str:
    if not curve:
        return ""
    if len(curve) <= points:
        chosen = curve
    else:
        idx = sorted({round(i * (len(curve) - 1) / (points - 1)) for i in range(points)})
        chosen = [curve[i] for i in idx]
    return " ".join(f"{_num(v)}@{int(s)}" for s, v in chosen)


def history_table(request: ProposalRequest) -> str:
    study = request.study
    trials = list(request.trials)
    if not trials:
        return "(no trials yet)"
    omitted = 0
    if len(trials) > MAX_HISTORY_ROWS:
        scored = [t for t in trials if t.value is not None and t.status == TrialStatus.SUCCEEDED]
        reverse = study.objective.direction == "maximize"
        best = sorted(scored, key=lambda t: t.value or 0.0, reverse=reverse)[:30]
        recent = trials[-(MAX_HISTORY_ROWS - len(best)) :]
        keep = {t.number for t in best} | {t.number for t in recent} | {0}
        omitted = len(trials) - len(keep)
        trials = [t for t in trials if t.number in keep]
    metric = study.objective.metric
    curve_name = study.objective.curve_metric
    rows = [
        f"| # | diff from base | status | {metric} | {curve_name} curve (value@step) | note |",
        "|---|---|---|---|---|---|",
    ]
    for t in trials:
        mark = "*" if t.number == request.best_trial else ""
        diff = "(base)" if not t.diff else short_json(t.diff, 160)
        value = _num(t.value) if t.value is not None else ""
        note = []
        if t.source == "noise":
            note.append("noise repeat of the base config")
        if t.decision in ("keep", "discard"):
            note.append(t.decision)
        if t.failure:
            note.append(t.failure[:140].replace("|", "/").replace("\n", " "))
        rows.append(
            f"| {t.number}{mark} | {diff} | {t.status.value} | {value} | "
            f"{curve_summary(t.curve)} | {'; '.join(note)} |"
        )
    if omitted:
        rows.append(f"({omitted} middling trials omitted)")
    return "\n".join(rows)


def describe_noise(request: ProposalRequest) -> str:
    study = request.study
    if request.noise_floor is not None and study.noise.repeats:
        return (
            f"{_num(request.noise_floor)} ({_num(study.noise.sigmas)} standard deviations of "
            f"{study.noise.repeats + 1} runs of the base config with other seeds): a trial is kept "
            "as the new best only when it beats the best by more than this."
        )
    if study.noise.repeats:
        return "being measured: the base config runs again with other seeds."
    return "not measured (noise.repeats is 0): small differences may be luck."


def describe_budget(request: ProposalRequest) -> str:
    left = request.budget_left
    if not left:
        return "(not given)"
    return "; ".join(f"{k}: {v}" for k, v in left.items())


def render_prompts(request: ProposalRequest) -> tuple[str, str]:
    study = request.study
    obj = study.objective
    objective = f"{obj.metric}, to {obj.direction} (the last value a trial logs)"
    if obj.step_metric:
        objective += f"; its learning curve is read from {obj.step_metric}"
    system = prompts.render("proposer_system")
    user = prompts.render(
        "proposer_user",
        name=study.name,
        program=study.program.strip() or "(none given)",
        objective=objective,
        space=describe_space(study),
        base_config=json.dumps(study.base_config, indent=1, sort_keys=True),
        noise=describe_noise(request),
        budget=describe_budget(request),
        n_trials=len(request.trials),
        history=history_table(request),
        n=request.n,
    )
    return system, user


def tool_schema(study: Study, n: int) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for key, p in study.search_space.items():
        if isinstance(p, FloatParam):
            props[key] = {"type": "number", "minimum": p.low, "maximum": p.high}
        elif isinstance(p, IntParam):
            props[key] = {"type": "integer", "minimum": p.low, "maximum": p.high}
        else:
            props[key] = {"enum": list(p.values)}
    return {
        "type": "object",
        "properties": {
            "trials": {
                "type": "array",
                "minItems": n,
                "maxItems": n,
                "items": {
                    "type": "object",
                    "properties": {
                        "diff": {
                            "type": "object",
                            "properties": props,
                            "additionalProperties": False,
                        },
                        "rationale": {"type": "string"},
                    },
                    "required": ["diff", "rationale"],
                },
            }
        },
        "required": ["trials"],
    }


# --- the proposer ------------------------------------------------------------------------------


class LLMProposer(Proposer):
    """Asks an LLM for diffs; needs the provider's API key in the environment."""

    name = "llm"

    def __init__(self, config: LlmProposerConfig) -> None:
        self.config = config
        self.provider = config.provider
        self.model = config.resolved_model
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
        if self.config.fallback == "random":
            return RandomProposer(self.config.seed)
        return TpeProposer(self.config.seed)

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
        tool = tool_schema(request.study, request.n)
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
                f"- {short_json(p.get('diff'), 160) if p.get('diff') is not None else 'reply'}: "
                + "; ".join(p["problems"])
                for p in problems
            )
            or f"- you proposed {len(accepted)} valid trial(s); {request.n} were asked for"
        )
        retry_text = prompts.render("proposer_retry", problems=problems_text, n=missing)
        messages += [reply.assistant, self._followup(reply, retry_text)]
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
            key = config_key(request.study, request.study.config_for(p.diff))
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
            diff, found = check_diff(request.study, item["diff"], taken)
            if diff is None:
                problems.append({"diff": item["diff"], "problems": found, "rationale": rationale})
                continue
            taken[config_key(request.study, request.study.config_for(diff))] = (
                f"proposal {len(request.pending) + len(already) + len(out) + 1} of this batch"
            )
            out.append(Proposal(diff=diff, rationale=rationale.strip(), source=self.name))
        return out, problems

    # --- providers ---

    def _client(self) -> Any:
        if self._sdk is None:
            kwargs = {
                "api_key": self.api_key,
                "max_retries": self.config.max_retries,
                "timeout": self.config.timeout_s,
            }
            if self.config.base_url:
                kwargs["base_url"] = self.config.base_url
            if self.provider == "anthropic":
                import anthropic

                self._sdk = anthropic.Anthropic(**kwargs)
            else:
                import openai

                self._sdk = openai.OpenAI(**kwargs)
        return self._sdk

    def _call(self, system: str, messages: list[dict[str, Any]], tool: dict[str, Any]) -> Reply:
        if self.provider == "anthropic":
            return self._call_anthropic(system, messages, tool)
        return self._call_openai(system, messages, tool)

    def _followup(self, reply: Reply, text: str) -> dict[str, Any]:
        if self.provider == "anthropic":
            if reply.tool_call_id:
                return {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": reply.tool_call_id,
                            "is_error": True,
                            "content": text,
                        }
                    ],
                }
            return {"role": "user", "content": text}
        if reply.tool_call_id:
            return {"role": "tool", "tool_call_id": reply.tool_call_id, "content": text}
        return {"role": "user", "content": text}

    def _call_anthropic(
        self, system: str, messages: list[dict[str, Any]], tool: dict[str, Any]
    ) -> Reply:
        import anthropic

        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.config.max_tokens,
            "system": system,
            "messages": messages,
            "tools": [{"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": tool}],
            "tool_choice": {"type": "tool", "name": TOOL_NAME},
        }
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        with _provider_errors(anthropic, self.model):
            msg = self._client().messages.create(**kwargs)
        if not hasattr(msg, "content"):
            raise CallFailed("the provider's reply was not a Messages response")
        usage = getattr(msg, "usage", None)
        blocks = list(msg.content or [])
        content: list[dict[str, Any]] = []
        tool_block = None
        texts = []
        for b in blocks:
            if b.type == "tool_use":
                content.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
                if tool_block is None and b.name == TOOL_NAME:
                    tool_block = b
            elif b.type == "text":
                content.append({"type": "text", "text": b.text})
                texts.append(b.text)
        reply = Reply(
            payload=None,
            parse_error=None,
            assistant={"role": "assistant", "content": content or [{"type": "text", "text": "-"}]},
            tool_call_id=tool_block.id if tool_block is not None else None,
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
            cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", 0) or 0),
        )
        if tool_block is not None:
            reply.payload = tool_block.input
        else:
            reply.payload, reply.parse_error = _json_from_text("\n".join(texts))
        return reply

    def _call_openai(
        self, system: str, messages: list[dict[str, Any]], tool: dict[str, Any]
    ) -> Reply:
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, *messages],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": TOOL_NAME,
                        "description": TOOL_DESCRIPTION,
                        "parameters": tool,
                    },
                }
            ],
            "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}},
            "max_completion_tokens": self.config.max_tokens,
        }
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        with _provider_errors(openai, self.model):
            resp = self._client().chat.completions.create(**kwargs)
        choices = getattr(resp, "choices", None)
        if not choices:
            raise CallFailed("the provider's reply had no choices")
        message = choices[0].message
        usage = getattr(resp, "usage", None)
        calls = list(message.tool_calls or [])
        assistant: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        if calls:
            assistant["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in calls
            ]
        call = next((c for c in calls if c.function.name == TOOL_NAME), None)
        reply = Reply(
            payload=None,
            parse_error=None,
            assistant=assistant,
            tool_call_id=call.id if call is not None else None,
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )
        if call is not None:
            try:
                reply.payload = json.loads(call.function.arguments or "")
            except json.JSONDecodeError as exc:
                reply.parse_error = f"the tool arguments are not valid JSON ({exc.msg})"
        else:
            reply.payload, reply.parse_error = _json_from_text(message.content or "")
        if len(calls) > 1 and reply.tool_call_id:
            # every tool call needs an answer before the next user turn; answer the extras
            reply.assistant["tool_calls"] = [
                tc for tc in assistant["tool_calls"] if tc["id"] == reply.tool_call_id
            ]
        return reply


def replace_n(tool: dict[str, Any], n: int) -> dict[str, Any]:
    out = json.loads(json.dumps(tool))
    out["properties"]["trials"]["minItems"] = n
    out["properties"]["trials"]["maxItems"] = n
    return out


def _json_from_text(text: str) -> tuple[Any, str | None]:
    """Some models answer in text despite the tool: take a JSON object from it if there is one."""
    text = text.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text[text.find("\n") + 1 :] if "\n" in text else text
    start = text.find("{")
    if start >= 0:
        try:
            return json.loads(text[start : text.rfind("}") + 1]), None
        except json.JSONDecodeError:
            pass
    shown = text[:120].replace("\n", " ")
    return None, f"the reply did not call the tool {TOOL_NAME} (it said: {shown!r})"


@contextmanager
def _provider_errors(sdk: Any, model: str) -> Iterator[None]:
    """Translate an SDK's exceptions (anthropic and openai share their names) to CallFailed."""
    try:
        yield
    except (sdk.AuthenticationError, sdk.PermissionDeniedError) as exc:
        raise CallFailed(_api_message(exc), fatal=True, status=exc.status_code) from None
    except sdk.NotFoundError as exc:
        raise CallFailed(
            f"model {model!r} or endpoint not found: {_api_message(exc)}",
            fatal=True,
            status=exc.status_code,
        ) from None
    except sdk.APIStatusError as exc:
        raise CallFailed(_api_message(exc), status=exc.status_code) from None
    except sdk.APIError as exc:
        raise CallFailed(f"{type(exc).__name__}: {_first_line(exc)}") from None
    except ValueError as exc:  # a body that is not JSON
        raise CallFailed(f"the provider's reply was not valid JSON ({_first_line(exc)})") from None
    except CallFailed:
        raise
    except Exception as exc:
        raise CallFailed(f"{type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


def _api_message(exc: Any) -> str:
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    detail = None
    if isinstance(body, dict):
        err = body.get("error", body)
        detail = err.get("message") if isinstance(err, dict) else str(err)
    detail = detail or _first_line(exc)
    return f"HTTP {status}: {detail}"[:300] if status else detail[:300]
