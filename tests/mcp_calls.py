"""Calls over an MCP SDK client that must succeed or fail, for the tests of issue 39."""

from __future__ import annotations

from typing import Any

from mcp import Client as McpClient


def text_of(result: Any) -> str:
    return result.content[0].text


async def ok(mcp: McpClient, tool: str, **args: Any) -> tuple[dict[str, Any], str]:
    """A call that must succeed: its structured reply and its text."""
    result = await mcp.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    return result.structured_content, text_of(result)


async def refused(mcp: McpClient, tool: str, **args: Any) -> str:
    """A call that must be a tool error: its text."""
    result = await mcp.call_tool(tool, args)
    assert result.is_error, text_of(result)
    return text_of(result)
