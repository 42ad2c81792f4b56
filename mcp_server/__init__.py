"""The MCP server ``air-mcp``: thin tools over ``air_skills.Client`` and ``autoresearch``.

``tools`` holds the logic as plain functions (``jobs``, ``logs``, ``studies``), ``schemas`` their
reply shapes, ``render`` their text, ``wording`` the tool names and errors an agent reads,
``adapter`` the wrapping into MCP tools, ``server`` the registration and the command line,
``stdio`` and ``http`` the transports.
"""
