"""The stdio transport of ``air-mcp``: the SDK's framing on event-loop pipes, without threads.

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``: a worker-thread hop
for every line in and every write and flush out, about a third of a small call's cost. Here
stdin and stdout are asyncio pipe transports; the SDK still parses and frames the messages.
As in the SDK, fd 0 then reads /dev/null and fd 1 points at stderr, so a stray print (or a
child that inherits them) cannot corrupt the wire. Anything that is not a pipe or a socket
(a terminal, a file) is served by the SDK's own transport.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

MAX_LINE_BYTES = 256 * 1024 * 1024


class _Lines:
    """``async for line in stdin``: decoded lines, as the SDK's reader expects."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


class _Writer:
    """``await stdout.write(text)`` / ``await stdout.flush()``, as the SDK's writer expects."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _claim_wire() -> tuple[_Lines, _Writer]:
    """Move the wire to private descriptors; point fd 0 at /dev/null and fd 1 at stderr."""
    loop = asyncio.get_running_loop()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return _Lines(reader), _Writer(writer)


async def serve_stdio(server: MCPServer) -> None:
    """Serve ``server`` on this process's stdin and stdout until stdin ends."""
    lowlevel: Any = getattr(server, "_lowlevel_server", None)  # what run_stdio_async drives
    if lowlevel is None or not (_is_pipe_or_socket(0) and _is_pipe_or_socket(1)):
        await server.run_stdio_async()
        return
    stdin, stdout = await _claim_wire()
    async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
