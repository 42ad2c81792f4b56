"""Issue 37.14: `air-mcp --transport http` listens on loopback only unless told otherwise."""

from __future__ import annotations

import pytest
from listening import beyond_loopback, listening, process_tree

pytestmark = pytest.mark.slow


def test_air_mcp_over_http_listens_on_loopback_only(spawn_air_mcp) -> None:
    sp = spawn_air_mcp(["--transport", "http", "--port", "0"])
    port = int(sp.url().rsplit(":", 1)[1].split("/")[0])
    tree = process_tree(sp.proc.pid)
    assert port in [p for _, p, _, _ in listening(tree)]
    assert not beyond_loopback(tree), sp.stderr
