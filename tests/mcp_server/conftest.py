"""Fixtures for the MCP server tests: the server in-process, and `air-mcp` as a real process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import wait_until

PY = sys.executable


def air_mcp_command() -> list[str]:
    """The installed `air-mcp` console script (beside this Python), else `python -m`."""
    script = Path(PY).with_name("air-mcp")
    if script.exists():
        return [str(script)]
    found = shutil.which("air-mcp")
    return [found] if found else [PY, "-m", "mcp_server.server"]


@pytest.fixture
def air_mcp() -> list[str]:
    """The argv that starts `air-mcp`."""
    return air_mcp_command()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def shared_mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One MLflow sqlite store for the session: creating one takes seconds, so it is made once."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    return uri


@pytest.fixture
def tracked(air_home: Path, shared_mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Jobs of this test are tracked in the session's MLflow store."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", shared_mlflow_uri)
    return shared_mlflow_uri


@pytest.fixture
def server(client):
    from mcp_server.server import build_server

    return build_server(client)


@dataclass
class ServerProcess:
    """A running `air-mcp` with its stderr collected line by line (for URL and leak checks)."""

    proc: subprocess.Popen[str]
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def url(self) -> str:
        line = wait_until(
            lambda: (
                next((ln for ln in self.stderr_lines if "listening on" in ln), None)
                or self._check_alive()
            ),
            timeout_s=30,
        )
        return re.search(r"(http://\S+/mcp)", line).group(1)  # type: ignore[union-attr]

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"air-mcp exited {self.proc.returncode}: {self.stderr}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_air_mcp(args: list[str], env: dict[str, str]) -> ServerProcess:
    proc = subprocess.Popen(
        [*air_mcp_command(), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sp = ServerProcess(proc)

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            sp.stderr_lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return sp


@pytest.fixture
def spawn_air_mcp(air_home: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start `air-mcp ARGS` with the test's AIR_HOME; every one started is stopped at the end."""
    started: list[ServerProcess] = []

    def spawn(args: list[str], **env: str | None) -> ServerProcess:
        full = dict(os.environ)
        for key, value in env.items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        sp = start_air_mcp(args, full)
        started.append(sp)
        return sp

    yield spawn
    for sp in started:
        sp.stop()
