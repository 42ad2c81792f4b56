"""Plain tool functions bound to a client and wrapped as MCP Tools: schema from the signature.

A wrapped tool refuses unknown arguments, answers an ``AirError`` as an error result (rendered by
``mcp_server.wording.error_text``) and a reply as structured content beside its short text.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict

from air_skills.client import Client
from air_skills.errors import AirError
from mcp_server import tools
from mcp_server.render import dump, render_reply, render_wait
from mcp_server.schemas import WaitReply
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


def _forbid_extra(tool: Tool) -> Tool:
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


def _description(fn: Callable[..., Any]) -> str:
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
        call, name=fn.__name__, title=title, description=_description(fn), annotations=annotations
    )
    return _forbid_extra(tool)


def wait_tool(client: Client, annotations: ToolAnnotations) -> Tool:
    """wait_for_jobs: the plain function on a worker thread, progress sent as notifications."""
    sig = inspect.signature(tools.wait_for_jobs, eval_str=True)
    params = [p for n, p in sig.parameters.items() if n not in ("client", "on_progress", "stop")]

    async def call(ctx: Context, **kwargs: Any) -> CallToolResult:
        stop = threading.Event()

        def progress(done: int, total: int, message: str) -> None:
            anyio.from_thread.run(ctx.report_progress, done, total, message)

        run = functools.partial(
            tools.wait_for_jobs, client, on_progress=progress, stop=stop, **kwargs
        )
        try:
            reply = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        except AirError as exc:
            return error_result(exc)
        finally:
            stop.set()  # a cancelled call leaves its thread: this ends it at its next poll
        return ok_result(reply, render_wait(reply))

    ctx_param = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    call.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[*params, ctx_param], return_annotation=Annotated[CallToolResult, WaitReply]
    )
    call.__name__ = "wait_for_jobs"
    tool = Tool.from_function(
        call,
        name="wait_for_jobs",
        title="Wait for jobs",
        description=_description(tools.wait_for_jobs),
        annotations=annotations,
    )
    return _forbid_extra(tool)
