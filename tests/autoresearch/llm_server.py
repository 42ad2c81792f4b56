"""A local HTTP server that speaks the Anthropic Messages and OpenAI Chat Completions wire
formats, scripted per test: each request takes the next queued reply (status, JSON or raw bytes,
headers). Every request is kept so that tests can read what the proposer sent."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    status: int = 200
    body: Any = None  # JSON-able, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


class FakeLLMServer:
    def __init__(self) -> None:
        self.replies: deque[Scripted] = deque()
        self.requests: list[Seen] = []
        self.responder: Callable[[str, Any], Scripted] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                server.requests.append(
                    Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                if server.replies:
                    reply = server.replies.popleft()
                elif server.responder is not None:
                    reply = server.responder(self.path, body)
                else:
                    reply = Scripted(500, {"error": {"message": "no scripted reply left"}})
                data = (
                    reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                )
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> FakeLLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ---

    def push(self, status: int = 200, body: Any = None, **headers: str) -> None:
        self.replies.append(
            Scripted(status, body, {k.replace("_", "-"): v for k, v in headers.items()})
        )

    def anthropic_tool(
        self, trials: list[dict[str, Any]] | Any, input_tokens: int = 1000, output_tokens: int = 200
    ) -> None:
        payload = {"trials": trials} if isinstance(trials, list) else trials
        tool_id = f"toolu_{len(self.requests)}_{len(self.replies)}"
        self.push(body=_anthropic_body(payload, tool_id, input_tokens, output_tokens))

    def anthropic_text(self, text: str) -> None:
        self.push(
            body={
                "id": "msg_text",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 900, "output_tokens": 50},
            }
        )

    def anthropic_error(self, status: int, kind: str, message: str, **headers: str) -> None:
        self.push(status, {"type": "error", "error": {"type": kind, "message": message}}, **headers)

    def openai_tool(
        self,
        trials: list[dict[str, Any]] | Any,
        prompt_tokens: int = 1000,
        completion_tokens: int = 200,
        raw_arguments: str | None = None,
    ) -> None:
        payload = {"trials": trials} if isinstance(trials, list) else trials
        args = raw_arguments if raw_arguments is not None else json.dumps(payload)
        call_id = f"call_{len(self.requests)}_{len(self.replies)}"
        self.push(body=_openai_body(args, call_id, prompt_tokens, completion_tokens))

    def openai_error(self, status: int, message: str, **headers: str) -> None:
        self.push(
            status,
            {"error": {"message": message, "type": "server_error", "param": None, "code": None}},
            **headers,
        )

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]


def schema_following(path: str, body: Any) -> Scripted:
    """A stand-in model that answers any propose_trials request with valid-looking diffs drawn
    from the tool's own schema, seeded by the prompt: the same prompt, the same answer."""
    import hashlib
    import random

    if path.endswith("/chat/completions"):
        schema = body["tools"][0]["function"]["parameters"]
        prompt = json.dumps(body["messages"], sort_keys=True)
    else:
        schema = body["tools"][0]["input_schema"]
        prompt = json.dumps([body.get("system"), body["messages"]], sort_keys=True)
    rng = random.Random(hashlib.sha256(prompt.encode()).hexdigest())
    trials_schema = schema["properties"]["trials"]
    n = trials_schema.get("maxItems", 1)
    props = trials_schema["items"]["properties"]["diff"]["properties"]
    trials = []
    for i in range(n):
        diff: dict[str, Any] = {}
        for key, p in props.items():
            if "enum" in p:
                diff[key] = rng.choice(p["enum"])
            elif p["type"] == "integer":
                diff[key] = rng.randint(p["minimum"], p["maximum"])
            else:
                diff[key] = round(rng.uniform(p["minimum"], p["maximum"]), 4)
        trials.append({"diff": diff, "rationale": f"guess {i}"})
    payload = {"trials": trials}
    if path.endswith("/chat/completions"):
        return Scripted(200, _openai_body(json.dumps(payload), "call_x"))
    return Scripted(200, _anthropic_body(payload, "toolu_x"))


def _anthropic_body(
    payload: Any, tool_id: str, input_tokens: int = 1000, output_tokens: int = 200
) -> dict[str, Any]:
    return {
        "id": f"msg_{tool_id}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "Here are the next trials."},
            {"type": "tool_use", "id": tool_id, "name": "propose_trials", "input": payload},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _openai_body(
    arguments: str, call_id: str, prompt_tokens: int = 1000, completion_tokens: int = 200
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "propose_trials", "arguments": arguments},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
