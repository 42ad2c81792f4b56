"""The two LLM providers' wire code: one tool-forced request each (Anthropic Messages, OpenAI
Chat Completions), the reply reduced to a ``Reply``, the SDKs' errors turned into ``CallFailed``.

HTTP retries (429, 5xx, connection errors) with back-off are the SDKs' own.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from air_skills.errors import ProposerError
from autoresearch.proposers.llm_prompt import TOOL_DESCRIPTION, TOOL_NAME

EXTRA = "pip install 'air-skills[llm]'"


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


def load_sdk(provider: str) -> Any:
    """The provider's SDK module (``anthropic`` or ``openai``), or a clean error naming the
    extra to install: checked when the proposer is built, so a study refuses at its start."""
    try:
        return importlib.import_module(provider)
    except ImportError as exc:
        raise ProposerError(
            f"the llm proposer (provider {provider}) needs the {provider!r} package, which is"
            f" not installed here ({exc})",
            hint=f"{EXTRA}, or use the offline proposer: `proposer: tpe`",
            code="missing-extra",
            package=provider,
        ) from None


def make_client(sdk: Any, provider: str, **kwargs: Any) -> Any:
    if provider == "anthropic":
        return sdk.Anthropic(**kwargs)
    return sdk.OpenAI(**kwargs)


def followup(provider: str, reply: Reply, text: str) -> dict[str, Any]:
    """The message that answers ``reply`` with ``text`` (the problems, on a retry)."""
    if provider == "anthropic":
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


def call_anthropic(
    sdk: Any, client: Any, config: Any, model: str, system: str, messages: list, tool: dict
) -> Reply:
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": config.max_tokens,
        "system": system,
        "messages": messages,
        "tools": [{"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": tool}],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
    }
    if config.temperature is not None:
        kwargs["temperature"] = config.temperature
    with _provider_errors(sdk, model):
        msg = client.messages.create(**kwargs)
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


def call_openai(
    sdk: Any, client: Any, config: Any, model: str, system: str, messages: list, tool: dict
) -> Reply:
    kwargs: dict[str, Any] = {
        "model": model,
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
        "max_completion_tokens": config.max_tokens,
    }
    if config.temperature is not None:
        kwargs["temperature"] = config.temperature
    with _provider_errors(sdk, model):
        resp = client.chat.completions.create(**kwargs)
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


CALLS = {"anthropic": call_anthropic, "openai": call_openai}


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
