"""The MCP server ``air-mcp``: thin tools over ``air_skills.Client`` and ``autoresearch``.

``tools`` holds the logic as plain functions, ``schemas`` their reply shapes, ``server`` the
MCP registration and the command line, ``http`` the guard of the streamable HTTP transport.
"""
