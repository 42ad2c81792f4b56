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
    return tool


def describe(fn: Callable[..., Any]) -> str:
    return inspect.cleandoc(fn.__doc__ or "")


def plain_tool(
    fn: Callable[..., Any], client: Client, annotations: ToolAnnotations, title: str
) -> Tool:
    """A Tool that calls ``fn(client, **arguments)``: its schema from fn's other parameters."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for name, p in sig.parameters.items() if name != "client"]

    def call(**kwargs: Any) -> CallToolResult:
        try:
            reply = fn(client, **kwargs)
        except AirError as exc:
            return error_result(exc)
        return ok_result(reply, render_reply(fn.__name__, reply))

    call.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=Annotated[CallToolResult, sig.return_annotation]
    )
    call.__name__ = fn.__name__
    tool = Tool.from_function(
        call, name=fn.__name__, title=title, description=describe(fn), annotations=annotations
    )
    return forbid_extra(tool)
