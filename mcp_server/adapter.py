"""Plain tool functions bound to a client and wrapped as MCP Tools: schema from the signature.

A wrapped tool refuses unknown arguments, answers an ``AirError`` as an error result (rendered by
``mcp_server.wording.error_text``) and a reply as structured content beside its short text.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict

from air_skills.client import Client
from air_skills.errors import AirError
from mcp_server.render import dump, render_reply
from mcp_server.wording import error_text


def error_result(exc: AirError) -> CallToolResult:
    """The tool error an agent reads: ``[code] what happened`` / ``Next: ...``."""
    text = error_text(exc)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def ok_result(reply: BaseModel, text: str) -> CallToolResult:
    """The reply as structured content, with its short text beside it."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=dump(reply),
    )


def forbid_extra(tool: Tool) -> Tool:
    """Refuse unknown arguments (the SDK's argument models ignore them)."""
    base = tool.fn_metadata.arg_model
    strict = type(
        base.__name__,
        (base,),
        {
            "__module__": base.__module__,
            "model_config": ConfigDict(extra="forbid", arbitrary_types_allowed=True),
        },
    )
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)
    return compact_tool(tool)


LOOSE_BOUND = 100  # maxLength 200 on an id: enforced, but no call comes near it


def compact_schema(node: Any, in_properties: bool = False) -> Any:
    """A JSON schema without what a client does not need: titles, null defaults, the null
    branch of optional fields (replies drop None fields; arguments may still be null)."""
    if isinstance(node, list):
        return [compact_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    if in_properties:  # keys here are field names, never keywords
        return {k: compact_schema(v) for k, v in node.items()}
    if "properties" in node and "$ref" not in node:  # a model's docstring: the field says it
        node = {k: v for k, v in node.items() if k != "description" or "type" not in node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and (value is None or value is False):
            continue  # an absent flag is false: no need to say so
        if key == "minLength" and value == 1:
            continue  # refused by the server all the same
        if key == "additionalProperties" and value is True:
            continue  # JSON Schema's default
        if key in ("maxLength", "maxItems", "maximum") and value >= LOOSE_BOUND:
            continue  # enforced by the server all the same; not worth sending each session
        out[key] = compact_schema(value, in_properties=key in ("properties", "$defs"))
    if out.get("type") == "string" and ("enum" in out or "const" in out):
        del out["type"]  # the listed strings say it
    branches = out.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [b for b in branches if b != {"type": "null"}]
        if len(rest) == 1:
            del out["anyOf"]
            out = {**rest[0], **out}
    return out


def shape_only(node: Any) -> Any:
    """An output schema reduced to its shape: the reply's field names (each field's type is
    left open: the values say it). The text content and the tool's description say what the
    fields mean; the tool list stays small (issues 18 and 24: 17 tools in 16 KB)."""
    if isinstance(node, list):
        return [shape_only(v) for v in node]
    if not isinstance(node, dict):
        return node
    drop = ("description", "default", "format", "additionalProperties", "$defs", "enum", "required")
    if "$ref" in node:  # a nested model: an object (its fields are in the text and the docs)
        return {"type": "object"}
    out = {}
    for key, value in node.items():
        if key in drop and (key == "$defs" or not isinstance(value, dict)):
            continue
        if key == "properties":
            out[key] = dict.fromkeys(value, {})
        else:
            out[key] = shape_only(value)
    return out


def compact_tool(tool: Tool) -> Tool:
    """The tool with compact input and output schemas: the tool list is sent on every session."""
    tool.parameters = compact_schema(tool.parameters)
    if tool.fn_metadata.output_schema is not None:
        tool.fn_metadata.output_schema = shape_only(compact_schema(tool.fn_metadata.output_schema))
    return tool


def describe(fn: Callable[..., Any]) -> str:
    return inspect.cleandoc(fn.__doc__ or "")


def plain_tool(
    fn: Callable[..., Any], client: Client, annotations: ToolAnnotations, title: str
) -> Tool:
    """A Tool that calls ``fn(client, **arguments)``: its schema from fn's other parameters."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for name, p in sig.parameters.items() if name != "client"]

    def call(ctx: Any = None, **kwargs: Any) -> CallToolResult:
        try:
            reply = fn(caller_client(client, ctx), **kwargs)
        except AirError as exc:
            return error_result(exc)
        return ok_result(reply, render_reply(fn.__name__, reply))

    call.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=Annotated[CallToolResult, sig.return_annotation]
    )
    call.__name__ = fn.__name__
    tool = Tool.from_function(
        call,
        name=fn.__name__,
        title=title,
        description=describe(fn),
        annotations=annotations,
        context_kwarg="ctx",  # the SDK passes the request's context: who calls, over HTTP
    )
    return forbid_extra(tool)


def caller_client(client: Client, ctx: Any) -> Client:
    """The client acting for the HTTP caller's identity (``air mcp-token``); as is for the
    server's own token, stdio and in-process callers."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except (AttributeError, LookupError, ValueError):
        request = None
    scope = getattr(request, "scope", None) or {}
    identity = scope.get("state", {}).get("air_identity") if isinstance(scope, dict) else None
    return client.as_identity(identity)
