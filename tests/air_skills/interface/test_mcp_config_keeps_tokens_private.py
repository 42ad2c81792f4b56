"""Issue 30: the bearer token of an HTTP `air-mcp` never leaks through `air mcp-config`. The
Claude Code command it prints names ${AIR_MCP_TOKEN} (expanded by Claude Code from its
environment) instead of holding the token, so the token is never on a command line that
/proc/PID/cmdline shows to every user; a written config is owner-only at every moment, also
over an existing 0644 file (a poller thread reads the folder through repeated writes)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills.integrations.mcp_config import client_config_path, mcp_config

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
TOKEN = "tok-" + "5ec4e7" * 8


@pytest.fixture
def token_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user HOME and an AIR_HOME holding the token file, as `air-mcp --transport http`
    writes it (owner-only)."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "user").mkdir()
    air_home = tmp_path / "air_home"
    air_home.mkdir(mode=0o700)
    fd = os.open(air_home / "mcp-token", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, TOKEN.encode())
    os.close(fd)
    monkeypatch.setenv("AIR_HOME", str(air_home))
    monkeypatch.delenv("AIR_MCP_TOKEN", raising=False)
    return tmp_path


def test_printed_claude_code_command_holds_no_token(token_home: Path) -> None:
    url = "http://127.0.0.1:8765/mcp"
    proc = subprocess.run(
        [AIR, "mcp-config", "claude-code", "--http", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert TOKEN not in proc.stdout and TOKEN not in proc.stderr
    assert "${AIR_MCP_TOKEN}" in proc.stdout

    # Run what it printed, with a stand-in `claude` that records the argv it was given and
    # the environment Claude Code would expand the header from.
    bin_dir = token_home / "bin"
    bin_dir.mkdir()
    seen = token_home / "seen"
    stub = bin_dir / "claude"
    stub.write_text(
        '#!/bin/sh\ntr "\\0" "\\n" < /proc/$$/cmdline > "$SEEN.argv"\n'
        'printf %s "$AIR_MCP_TOKEN" > "$SEEN.env"\n'
    )
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SEEN": str(seen)}
    ran = subprocess.run(["sh", "-c", proc.stdout], env=env, capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    argv = Path(f"{seen}.argv").read_text()
    assert TOKEN not in argv, argv
    assert "Authorization: Bearer ${AIR_MCP_TOKEN}" in argv.splitlines()
    assert url in argv.splitlines() and "--transport" in argv.splitlines()
    assert Path(f"{seen}.env").read_text() == TOKEN  # what Claude Code expands it from


POLLER = """
import os, stat, sys
folder, token, stop = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
seen, exposed, settled = 0, [], set()
print("ready", flush=True)
while not os.path.exists(stop):
    for entry in os.scandir(folder):
        if entry.name in settled:
            continue
        try:
            with open(entry.path, "rb") as f:
                mode, holds = stat.S_IMODE(os.fstat(f.fileno()).st_mode), token in f.read()
        except OSError:
            continue  # renamed away meanwhile
        if holds:
            seen += 1
            if mode & 0o077:
                exposed.append(f"{entry.name} {oct(mode)}")
            elif ".bak-" in entry.name:
                settled.add(entry.name)  # a backup, owner-only: it stays so
print(seen, len(exposed), exposed[:5])
"""


def test_written_config_is_owner_only_at_every_moment(token_home: Path) -> None:
    """Another process reads the folder throughout 30 writes, each over a 0644 config
    without the token (as an editor saves it): no read finds the token in a file others
    could read."""
    path = client_config_path("cursor")
    path.parent.mkdir(parents=True)
    stop = token_home / "stop"
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, str(path.parent), TOKEN, str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert poller.stdout is not None and poller.stdout.readline().strip() == "ready"
        for port in range(9100, 9130):  # each a new URL: each write replaces the file
            path.write_text('{"mcpServers": {"fs": {"command": "npx"}}}\n')
            path.chmod(0o644)
            result = mcp_config("cursor", write=True, http_url=f"http://127.0.0.1:{port}/mcp")
            assert result["action"] == "updated"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        stop.touch()
        out, _ = poller.communicate(timeout=60)
    seen, exposed, names = out.split(" ", 2)
    assert int(exposed) == 0, names
    assert int(seen) > 0  # the poller did read the files that hold the token
    backups = list(path.parent.glob(path.name + ".bak-*"))
    assert len(backups) == 30
    assert all(stat.S_IMODE(b.stat().st_mode) == 0o600 for b in backups)


STRACE = shutil.which("strace")


@pytest.mark.skipif(STRACE is None, reason="strace is not installed")
def test_every_file_in_the_config_folder_is_created_owner_only(token_home: Path) -> None:
    """The system calls of a real `air mcp-config --write`: each file it creates beside the
    config is created 0600 and never given group or other bits (a race-free check of what
    the poller samples)."""
    path = client_config_path("cursor")
    path.parent.mkdir(parents=True)
    path.write_text('{"mcpServers": {"fs": {"command": "npx"}}}\n')
    path.chmod(0o644)
    trace = token_home / "trace"
    url = "http://127.0.0.1:9200/mcp"
    argv = [STRACE, "-f", "-qq", "-y", "-o", str(trace), "-e", "trace=openat,chmod,fchmod,fchmodat"]
    proc = subprocess.run(
        [*argv, AIR, "mcp-config", "cursor", "--http", url, "--write"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0 and "ptrace" in proc.stderr:
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    folder = str(path.parent)
    created, widened = 0, []
    for line in trace.read_text().splitlines():
        if folder not in line or "resumed" in line:
            continue
        mode = re.search(r", (0[0-7]+)\)", line)
        if "openat(" in line and "O_CREAT" in line:
            created += 1
            if mode is None or int(mode.group(1), 8) & 0o077:
                widened.append(line)
        elif "chmod" in line and mode is not None and int(mode.group(1), 8) & 0o077:
            widened.append(line)
    assert widened == [], widened
    assert created >= 2  # the backup and the new config
    assert TOKEN in path.read_text() and stat.S_IMODE(path.stat().st_mode) == 0o600
