"""``Client``: the one API that the CLI, the MCP server and the autoresearch loop all use.

``core`` holds launching, reading, waiting and cancelling; ``identities``, ``batches`` and ``pool``
are its parts, mixed in.
"""

from air_skills.client.core import Client

__all__ = ["Client"]
