"""A busy port (issue 38.8): `autoresearch serve` and `air-mcp --transport http` say
[address-in-use] with its Next: and print no URL; their default ports differ. list_gpus with
no GPUs says why."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "autoresearch.cli", "serve", "--port"],
        [sys.executable, "-m", "mcp_server.server", "--transport", "http", "--port"],
    ],
    ids=["study-page", "air-mcp-http"],
)
def test_busy_port_is_address_in_use_before_any_url(air_home, argv: list[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([*argv, str(port)], capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "[address-in-use]" in said and "Next:" in said, said
    assert "http://" not in said and "Traceback" not in said, said


def test_page_and_mcp_http_have_different_default_ports() -> None:
    from autoresearch.web.serve import serve
    from mcp_server.server import _parser

    assert _parser().parse_args(["--transport", "http"]).port != serve.__defaults__[1]


def test_list_gpus_without_gpus_says_why(air_home, monkeypatch: pytest.MonkeyPatch) -> None:
    from air_skills import Client
    from mcp_server.tools.jobs import list_gpus

    monkeypatch.setenv("AIR_SIMULATED_GPUS", "0")
    reply = list_gpus(Client(air_home))
    assert reply.gpus == [] and reply.notes and "no GPUs" in reply.notes[0]
    assert "AIR_SIMULATED_GPUS" in reply.notes[0]
