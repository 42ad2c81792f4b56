"""`air skills install` and `air mcp-config`: real files in a temp HOME and project, the real
CLI, and the written MCP config started through the SDK's stdio client."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air_skills.cli.app import app
from air_skills.errors import AirError, InvalidInput, InvalidState
from air_skills.integrations import mcp_config as mcp_configs
from air_skills.integrations import skills as integrations
from air_skills.integrations.mcp_config import client_config_path, mcp_config
from air_skills.integrations.skills import MANIFEST, bundled_skills, install_skills

runner = CliRunner()
DESIGN_TOOLS = {
    "launch_job", "get_job", "list_jobs", "get_logs", "get_metrics", "compare_jobs",
    "wait_for_jobs", "cancel_job", "list_gpus", "start_study", "get_study", "suggest_trials",
    "stop_study",
}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp HOME (every client path is HOME-relative), a temp project as the cwd."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("AIR_HOME", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return h


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def expected_files() -> dict[str, bytes]:
    return {f"{s}/{rel}": c for s, files in bundled_skills().items() for rel, c in files.items()}


# --- air skills install ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, project, where",
    [
        ("claude", False, "HOME/.claude/skills"),
        ("cursor", False, "HOME/.cursor/skills"),
        ("codex", False, "HOME/.agents/skills"),
        ("claude", True, "PROJECT/.claude/skills"),
        ("cursor", True, "PROJECT/.cursor/skills"),
        ("codex", True, "PROJECT/.agents/skills"),
    ],
)
def test_install_into_home_and_project(home: Path, target: str, project: bool, where: str) -> None:
    root = Path(where.replace("HOME", str(home)).replace("PROJECT", str(Path.cwd())))
    result = install_skills(target, project=project)
    assert Path(result["dir"]) == root
    installed = tree(root)
    for rel, content in expected_files().items():
        assert installed[rel] == content
    assert {f["action"] for f in result["files"]} == {"created"}
    assert {f["path"] for f in result["files"]} == {str(root / r) for r in expected_files()}
    for skill in bundled_skills():
        assert (root / skill / MANIFEST).is_file()
    assert not [p for p in root.iterdir() if p.name.startswith(".air-skills-")]  # no staging left


def test_install_into_a_folder(home: Path, tmp_path: Path) -> None:
    result = install_skills("./agent-skills")
    assert Path(result["dir"]) == Path.cwd() / "agent-skills"
    target = tmp_path / "abs" / "skills"
    install_skills(str(target))
    assert (target / "air-launch" / "SKILL.md").read_bytes() == bundled_skills()["air-launch"][
        "SKILL.md"
    ]


def test_reinstall_changes_nothing(home: Path) -> None:
    install_skills("claude")
    skill = home / ".claude" / "skills" / "air-launch" / "SKILL.md"
    before = skill.stat().st_mtime_ns
    result = install_skills("claude")
    assert {f["action"] for f in result["files"]} == {"unchanged"}
    assert skill.stat().st_mtime_ns == before


def test_a_locally_edited_skill_is_never_overwritten_without_force(home: Path) -> None:
    root = home / ".claude" / "skills"
    install_skills("claude")
    edited = root / "air-monitor" / "SKILL.md"
    edited.write_text(edited.read_text() + "\nmy own note\n")
    deleted = root / "air-launch" / "references" / "job-spec.md"
    deleted.unlink()
    snapshot = tree(root)
    with pytest.raises(InvalidState) as info:
        install_skills("claude")
    assert info.value.code == "skill-modified"
    assert str(edited) in info.value.message and "--force" in info.value.hint
    assert tree(root) == snapshot  # nothing half-written: the deleted file is not back either

    result = install_skills("claude", force=True)
    actions = {f["path"]: f["action"] for f in result["files"]}
    assert actions[str(edited)] == "replaced"
    assert actions[str(deleted)] == "created"
    assert edited.read_bytes() == bundled_skills()["air-monitor"]["SKILL.md"]


def test_a_file_we_wrote_and_nobody_edited_is_updated(home: Path) -> None:
    """An older version of our skill (matching our manifest) is refreshed without --force."""
    root = home / ".claude" / "skills"
    install_skills("claude")
    old = b"---\nname: air-launch\ndescription: an older version\n---\nold body\n"
    skill = root / "air-launch" / "SKILL.md"
    skill.write_bytes(old)
    manifest = json.loads((root / "air-launch" / MANIFEST).read_text())
    manifest["files"]["SKILL.md"] = integrations._sha(old)
    (root / "air-launch" / MANIFEST).write_text(json.dumps(manifest))
    (root / "air-launch" / "my-notes.md").write_text("mine")  # the user's own file
    result = install_skills("claude")
    actions = {f["path"]: f["action"] for f in result["files"]}
    assert actions[str(skill)] == "updated"
    assert skill.read_bytes() == bundled_skills()["air-launch"]["SKILL.md"]
    assert (root / "air-launch" / "my-notes.md").read_text() == "mine"


def test_a_skill_folder_we_did_not_write_counts_as_local_edits(home: Path) -> None:
    root = home / ".cursor" / "skills" / "air-launch"
    root.mkdir(parents=True)
    (root / "SKILL.md").write_text("someone else's skill")
    with pytest.raises(InvalidState, match="local edits"):
        install_skills("cursor")
    assert (root / "SKILL.md").read_text() == "someone else's skill"
    assert not (home / ".cursor" / "skills" / "air-monitor").exists()


def test_unknown_target_is_refused_and_writes_nothing(home: Path) -> None:
    for bad in ("claud", "vscode", "skills", ""):
        with pytest.raises(InvalidInput) as info:
            install_skills(bad)
        assert info.value.code == "unknown-target"
        assert "claude" in info.value.hint
    with pytest.raises(InvalidInput, match="--project"):
        install_skills("./somewhere", project=True)
    assert list(home.iterdir()) == [] and list(Path.cwd().iterdir()) == []


def test_a_target_under_a_file_is_not_writable(home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(AirError) as info:
        install_skills(str(blocker / "skills"))
    assert info.value.code == "target-not-writable"
    assert "nothing was changed" in info.value.message
    assert blocker.read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders anyway")
def test_a_read_only_target_is_not_writable(home: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(AirError) as info:
            install_skills(str(ro / "skills"))
        assert info.value.code == "target-not-writable"
    finally:
        ro.chmod(stat.S_IRWXU)
    assert list(ro.iterdir()) == []


def test_a_failure_midway_rolls_back_every_skill(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The third folder swap fails: the two swapped before are put back as they were."""
    root = home / ".claude" / "skills"
    install_skills("claude")
    for skill in bundled_skills():  # make every skill an outdated-but-ours install
        path = root / skill / "SKILL.md"
        path.write_bytes(b"old " + path.read_bytes())
        manifest = json.loads((root / skill / MANIFEST).read_text())
        manifest["files"]["SKILL.md"] = integrations._sha(path.read_bytes())
        (root / skill / MANIFEST).write_text(json.dumps(manifest))
    snapshot = tree(root)
    real_rename = os.rename
    calls = {"n": 0}

    def flaky_rename(src: Any, dst: Any) -> None:
        if Path(dst).parent == root:
            calls["n"] += 1
            if calls["n"] == 4:  # old aside, new in, old aside, (new in: fails)
                raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(integrations.os, "rename", flaky_rename)
    with pytest.raises(AirError) as info:
        install_skills("claude")
    assert info.value.code == "target-not-writable"
    assert "No space left" in info.value.message
    monkeypatch.setattr(integrations.os, "rename", real_rename)
    assert tree(root) == snapshot
    assert not [p for p in root.iterdir() if p.name.startswith(".air-skills-")]


def test_cli_skills_install(home: Path) -> None:
    result = runner.invoke(app, ["skills", "install", "--target", "./out", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dir"] == str(Path.cwd() / "out") and data["files"]
    result = runner.invoke(app, ["skills", "install", "--target", "./out"])
    assert result.exit_code == 0 and "unchanged" in result.stdout
    result = runner.invoke(app, ["skills", "install", "--target", "nowhere"])
    assert result.exit_code == 2
    assert result.stderr.startswith("[unknown-target] ")
    (Path.cwd() / "out" / "air-launch" / "SKILL.md").write_text("edited")
    result = runner.invoke(app, ["skills", "install", "--target", "./out"])
    assert result.exit_code == 1 and result.stderr.startswith("[skill-modified] ")
    result = runner.invoke(app, ["skills", "install", "--target", "./out", "--force"])
    assert result.exit_code == 0 and "replaced" in result.stdout


# --- air mcp-config ----------------------------------------------------------------------------


def air_mcp() -> str:
    return mcp_configs.air_mcp_command()


def test_the_entry_runs_the_installed_air_mcp_with_air_home(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cmd = air_mcp()
    assert os.path.isabs(cmd) and os.access(cmd, os.X_OK) and Path(cmd).name == "air-mcp"
    plain = mcp_config("claude")
    assert json.loads(plain["text"]) == {"mcpServers": {"air": {"command": cmd, "args": []}}}
    monkeypatch.setenv("AIR_HOME", "~/air-state")
    entry = json.loads(mcp_config("cursor")["text"])["mcpServers"]["air"]
    assert entry == {"command": cmd, "args": [], "env": {"AIR_HOME": str(home / "air-state")}}
    vscode = json.loads(mcp_config("vscode")["text"])
    assert vscode["servers"]["air"]["type"] == "stdio"
    assert vscode["servers"]["air"]["command"] == cmd
    line = mcp_config("claude-code")["text"]
    argv = shlex.split(line)
    assert argv[:4] == ["claude", "mcp", "add", "air"]
    assert argv[argv.index("-e") + 1] == f"AIR_HOME={home / 'air-state'}"
    assert argv[argv.index("--") + 1 :] == [cmd]


def test_the_config_paths_are_the_clients_own(home: Path) -> None:
    assert client_config_path("claude-code") == home / ".claude.json"
    assert client_config_path("cursor") == home / ".cursor" / "mcp.json"
    if sys.platform.startswith("linux"):
        assert client_config_path("claude") == (
            home / ".config" / "Claude" / "claude_desktop_config.json"
        )
        assert client_config_path("vscode") == home / ".config" / "Code" / "User" / "mcp.json"


@pytest.mark.parametrize(
    "client, key, existing",
    [
        ("claude", "mcpServers", {"mcpServers": {"fs": {"command": "npx", "args": ["fs"]}},
                                  "globalShortcut": "Ctrl+Space"}),
        ("cursor", "mcpServers", {"mcpServers": {"other": {"url": "http://127.0.0.1:9/mcp"}}}),
        ("vscode", "servers", {"servers": {"gh": {"type": "http", "url": "https://x/mcp"}},
                               "inputs": [{"id": "tok", "type": "promptString"}]}),
        ("claude-code", "mcpServers", {"numStartups": 12, "projects": {"/p": {"x": 1}},
                                       "mcpServers": {"old": {"type": "stdio", "command": "o"}}}),
    ],
)  # fmt: skip
def test_write_merges_keeps_everything_else_and_backs_up(
    home: Path, client: str, key: str, existing: dict[str, Any]
) -> None:
    path = client_config_path(client)
    path.parent.mkdir(parents=True, exist_ok=True)
    original = json.dumps(existing, indent=4).encode()
    path.write_bytes(original)
    result = mcp_config(client, write=True)
    assert result["action"] == "updated" and result["written"] == str(path)
    data = json.loads(path.read_text())
    for k, v in existing.items():
        if k != key:
            assert data[k] == v
    for name, server in existing[key].items():
        assert data[key][name] == server
    assert data[key]["air"]["command"] == air_mcp()
    assert Path(result["backup"]).read_bytes() == original
    again = mcp_config(client, write=True)
    assert again["action"] == "unchanged" and again["backup"] is None
    assert len(list(path.parent.glob(path.name + ".bak-*"))) == 1


@pytest.mark.parametrize("client", ["claude", "claude-code", "cursor", "vscode"])
def test_write_creates_a_missing_file(home: Path, client: str) -> None:
    result = mcp_config(client, write=True)
    path = client_config_path(client)
    assert result["action"] == "created" and result["backup"] is None
    data = json.loads(path.read_text())
    assert "air" in data["servers" if client == "vscode" else "mcpServers"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "content",
    [
        b'{"mcpServers": {"fs": {"command": "npx",}}}',  # trailing comma
        b'{\n  // a comment\n  "servers": {}\n}',
        b"[1, 2, 3]",
        b'{"mcpServers": ["not", "an", "object"]}',
        b"\xff\xfe garbage",
    ],
)
def test_write_refuses_a_file_it_cannot_parse(home: Path, content: bytes) -> None:
    path = client_config_path("cursor")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(InvalidState) as info:
        mcp_config("cursor", write=True)
    assert info.value.code in ("config-unparseable", "config-unreadable")
    assert '"air"' in info.value.hint  # the entry to paste by hand
    assert path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == ["mcp.json"]  # no backup, no temp


def test_an_empty_file_counts_as_an_empty_config(home: Path) -> None:
    path = client_config_path("cursor")
    path.parent.mkdir(parents=True)
    path.write_text("\n")
    assert mcp_config("cursor", write=True)["action"] == "updated"
    assert "air" in json.loads(path.read_text())["mcpServers"]


def test_unknown_client_and_missing_air_mcp(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as info:
        mcp_config("emacs")
    assert info.value.code == "unknown-client" and "vscode" in info.value.hint
    monkeypatch.setattr(mcp_configs.sys, "executable", str(tmp_path / "nobin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(AirError) as info:
        mcp_config("claude", write=True)
    assert info.value.code == "air-mcp-not-found" and "air-skills[mcp]" in info.value.hint
    assert not client_config_path("claude").exists()


def test_cli_mcp_config(home: Path) -> None:
    result = runner.invoke(app, ["mcp-config", "claude"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["mcpServers"]["air"]["command"] == air_mcp()
    result = runner.invoke(app, ["mcp-config", "claude-code"])
    assert result.exit_code == 0 and result.stdout.startswith("claude mcp add air")
    result = runner.invoke(app, ["mcp-config", "vscode", "--write", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["written"] == str(client_config_path("vscode"))
    result = runner.invoke(app, ["mcp-config", "vscode", "--write"])
    assert result.exit_code == 0 and "unchanged" in result.stderr
    result = runner.invoke(app, ["mcp-config", "zed"])
    assert result.exit_code == 2 and result.stderr.startswith("[unknown-client] ")
    client_config_path("cursor").parent.mkdir(parents=True)
    client_config_path("cursor").write_text("{oops")
    result = runner.invoke(app, ["mcp-config", "cursor", "--write"])
    assert result.exit_code == 1 and result.stderr.startswith("[config-unparseable] ")


def test_the_written_config_starts_the_server(home: Path, tmp_path: Path) -> None:
    """air mcp-config claude --write, then the SDK's stdio client runs the entry it wrote."""
    if importlib.util.find_spec("mcp_server.server") is None:
        pytest.skip("mcp_server.server does not exist yet")
    from mcp import Client, StdioServerParameters

    air_home = tmp_path / "air-home"
    result = runner.invoke(
        app, ["mcp-config", "claude", "--write", "--json"], env={"AIR_HOME": str(air_home)}
    )
    assert result.exit_code == 0, result.output
    written = json.loads(client_config_path("claude").read_text())
    entry = written["mcpServers"]["air"]
    assert entry["env"] == {"AIR_HOME": str(air_home)}
    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**entry["env"], "AIR_SIMULATED_GPUS": "2", "HOME": str(home)},
    )

    async def tool_names() -> set[str]:
        async with Client(params, read_timeout_seconds=60) as client:
            listing = await client.list_tools()
            gpus = await client.call_tool("list_gpus", {})
            assert not gpus.is_error
            return {t.name for t in listing.tools}

    assert DESIGN_TOOLS <= asyncio.run(asyncio.wait_for(tool_names(), timeout=90))
    assert air_home.is_dir()  # the server ran with the AIR_HOME the entry gave it
