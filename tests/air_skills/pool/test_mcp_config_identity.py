"""`air mcp-config CLIENT --http URL` with an identity's token (issue 29): from a token file
(`air mcp-token add` printed it) or a fresh identity (--identity NAME --project P, its token
kept owner-only under AIR_HOME/mcp-tokens); the token is never printed, and a token file that
other users can read is refused."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills import Client

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
URL = "http://127.0.0.1:8765/mcp"


@pytest.fixture
def user_env(tmp_path: Path, air_home: Path) -> dict[str, str]:
    (tmp_path / "user").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "user"), "AIR_HOME": str(air_home)}
    env.pop("AIR_MCP_TOKEN", None)
    return env


def air(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AIR, *args], capture_output=True, text=True, env=env, timeout=120)


def test_a_token_file_goes_into_the_clients_config_and_nowhere_else(
    tmp_path: Path, user_env: dict[str, str], client: Client
) -> None:
    token = client.add_identity("agent-a", "nlp")
    token_file = tmp_path / "agent-a.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o644)
    refused = air(user_env, "mcp-config", "cursor", "--http", URL, "--token-file", str(token_file))
    assert refused.returncode == 2 and "[token-file-open]" in refused.stderr
    assert "chmod 600" in refused.stderr and token not in refused.stderr + refused.stdout
    token_file.chmod(0o600)
    made = air(
        user_env, "mcp-config", "cursor", "--http", URL, "--token-file", str(token_file), "--write"
    )
    assert made.returncode == 0, made.stderr
    assert token not in made.stdout + made.stderr  # the file holds it, the terminal does not
    written = Path(user_env["HOME"]) / ".cursor" / "mcp.json"
    entry = json.loads(written.read_text())["mcpServers"]["air"]
    assert entry == {"url": URL, "headers": {"Authorization": f"Bearer {token}"}}
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    printed = air(
        user_env, "mcp-config", "claude-code", "--http", URL, "--token-file", str(token_file)
    )
    assert printed.returncode == 0, printed.stderr
    assert token not in printed.stdout and f"cat {token_file}" in printed.stdout


def test_identity_makes_an_agent_whose_token_only_the_config_holds(
    user_env: dict[str, str], air_home: Path, client: Client
) -> None:
    made = air(
        user_env,
        *("mcp-config", "vscode", "--http", URL, "--identity", "agent-b", "--project", "cv"),
        "--write",
    )
    assert made.returncode == 0, made.stderr
    kept = air_home / "mcp-tokens" / "agent-b"
    token = kept.read_text().strip()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert token not in made.stdout + made.stderr
    who = client.identity_for_token(token)
    assert who is not None and (who.name, who.project) == ("agent-b", "cv")
    config = Path(user_env["HOME"]) / ".config" / "Code" / "User" / "mcp.json"
    headers = json.loads(config.read_text())["servers"]["air"]["headers"]
    assert headers == {"Authorization": f"Bearer {token}"}
    again = air(user_env, "mcp-config", "vscode", "--http", URL, "--identity", "agent-b",
                "--project", "cv")  # fmt: skip
    assert again.returncode == 2 and "exists" in again.stderr
    no_url = air(user_env, "mcp-config", "vscode", "--identity", "agent-c", "--project", "cv")
    assert no_url.returncode == 2 and "[bad-identity-options]" in no_url.stderr
