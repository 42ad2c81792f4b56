"""`air mcp-config`: the MCP config entry that runs `air-mcp` for Claude, Claude Code, Cursor
and VS Code, printed or merged into the client's config file (atomically, with a backup).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import AirError, InvalidInput, InvalidState
from air_skills.integrations.dirs import make_dirs, remove_dirs

SERVER_NAME = "air"
MCP_CLIENTS = ("claude", "claude-code", "cursor", "vscode")


# --- air mcp-config ----------------------------------------------------------------------------


def air_mcp_command() -> str:
    """Absolute path of the installed `air-mcp`: beside this Python first, then on PATH."""
    bin_dir = Path(sys.executable).parent
    for name in ("air-mcp", "air-mcp.exe"):
        candidate = bin_dir / name
        if candidate.is_file():
            return str(candidate.absolute())
    found = shutil.which("air-mcp")
    if found:
        return str(Path(found).absolute())
    raise AirError(
        "the air-mcp command is not installed in this environment",
        code="air-mcp-not-found",
        hint="install the MCP extra: pip install 'air-skills[mcp]' (then rerun air mcp-config)",
    )


def server_entry() -> dict[str, Any]:
    """command, args and env of the stdio server: AIR_HOME when it is set, and the other
    non-secret AIR_* settings set in this shell (job_env.PASSTHROUGH_AIR_SETTINGS: simulated
    GPUs, data roots, sandbox...; never AIR_MCP_TOKEN or a key), so the server sees what the
    shell does."""
    from air_skills.runtime.execution.job_env import PASSTHROUGH_AIR_SETTINGS

    entry: dict[str, Any] = {"command": air_mcp_command(), "args": []}
    env = {n: os.environ[n] for n in PASSTHROUGH_AIR_SETTINGS if os.environ.get(n)}
    home = settings.get("AIR_HOME")
    if home:
        env["AIR_HOME"] = str(home.absolute())
    if env:
        entry["env"] = dict(sorted(env.items()))
    return entry


def carried_settings(entry: dict[str, Any]) -> list[str]:
    """The AIR_* names an entry's env carries (what `air mcp-config` says it copied)."""
    return sorted(entry.get("env") or {})


def _app_config_dir() -> Path:
    """Where desktop apps keep their settings, relative to HOME (as the apps compute it)."""
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
    return home / ".config"


def client_config_path(client_name: str) -> Path:
    """The client's user-level MCP config file."""
    if client_name == "claude":
        return _app_config_dir() / "Claude" / "claude_desktop_config.json"
    if client_name == "claude-code":
        return Path.home() / ".claude.json"
    if client_name == "cursor":
        return Path.home() / ".cursor" / "mcp.json"
    if client_name == "vscode":
        return _app_config_dir() / "Code" / "User" / "mcp.json"
    raise _unknown_client(client_name)


def _unknown_client(client_name: str) -> InvalidInput:
    return InvalidInput(
        f"unknown MCP client {client_name!r}",
        code="unknown-client",
        hint="use one of: " + ", ".join(MCP_CLIENTS),
        valid_keys=list(MCP_CLIENTS),
    )


def client_entry(client_name: str, entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the key that holds servers in the client's file, our entry in its format)."""
    if client_name in ("claude", "cursor"):
        return "mcpServers", dict(entry)
    if client_name == "claude-code":
        return "mcpServers", {"type": "stdio", **entry, "env": entry.get("env", {})}
    if client_name == "vscode":
        return "servers", {"type": "stdio", **entry}
    raise _unknown_client(client_name)


def claude_code_command(entry: dict[str, Any]) -> str:
    """The `claude mcp add` command line that registers the server for the user."""
    argv = ["claude", "mcp", "add", SERVER_NAME, "--scope", "user"]
    for key, value in (entry.get("env") or {}).items():
        argv += ["-e", f"{key}={value}"]
    argv += ["--", entry["command"], *entry.get("args", [])]
    return shlex.join(argv)


TOKEN_VARIABLE = "AIR_MCP_TOKEN"


def claude_code_http_command(url: str, token_file: Path | None = None) -> str:
    """The `claude mcp add` lines for an HTTP server, the token never on a command line
    (/proc/PID/cmdline is readable by every user): the header names ${AIR_MCP_TOKEN}, which
    Claude Code expands from its environment when it connects; the export line reads the
    token file (cat's command line holds the file's path, not the token). ``token_file``:
    an identity's token (`air mcp-token`), else the server's own."""
    from air_skills.home import default_home

    argv = ["claude", "mcp", "add", "--transport", "http", SERVER_NAME, url, "--scope", "user"]
    header = shlex.quote(f"Authorization: Bearer ${{{TOKEN_VARIABLE}}}")  # single-quoted
    if token_file is not None:
        quoted = shlex.quote(str(token_file))
        first = f'export {TOKEN_VARIABLE}="$(cat {quoted})"  # in the shell that starts claude'
    elif settings.get(TOKEN_VARIABLE):
        first = f"# {TOKEN_VARIABLE} must be set where claude runs (it is set here)"
    else:
        token_file = shlex.quote(str(default_home() / "mcp-token"))
        first = f'export {TOKEN_VARIABLE}="$(cat {token_file})"  # in the shell that starts claude'
    return f"{first}\n{shlex.join(argv)} --header {header}"


def mcp_token() -> str:
    """The bearer token of `air-mcp --transport http`: AIR_MCP_TOKEN, else AIR_HOME/mcp-token."""
    from air_skills.home import default_home

    token = settings.get("AIR_MCP_TOKEN")
    if token:
        return str(token)
    path = default_home() / "mcp-token"  # written owner-only by mcp_server.auth
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    if not token:
        raise InvalidState(
            f"no MCP token yet in {path}",
            code="no-mcp-token",
            hint="start `air-mcp --transport http` once (it creates the token file), or set"
            " AIR_MCP_TOKEN, then rerun air mcp-config",
        )
    return token


def read_token_file(path: Path) -> str:
    """An identity's token from ``path`` (`air mcp-token add` printed it): one line, a file
    that only its owner can read (a token readable by others is refused, not copied)."""
    try:
        mode = path.stat().st_mode
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"cannot read the token file {path}: {getattr(exc, 'strerror', None) or exc}",
            code="token-file-unreadable",
            hint="give the file you saved `air mcp-token add`'s token in, or use --identity NAME",
        ) from None
    if mode & 0o077:
        raise InvalidInput(
            f"the token file {path} is readable by other users (mode {mode & 0o777:o})",
            code="token-file-open",
            hint=f"chmod 600 {shlex.quote(str(path))}, then rerun",
        )
    if not token or any(c.isspace() for c in token):
        raise InvalidInput(
            f"the token file {path} holds no token (one line, no spaces)",
            code="token-file-empty",
            hint="save only the token `air mcp-token add` printed in it",
        )
    return token


def http_client_entry(
    client_name: str, url: str, token: str | None = None
) -> tuple[str, dict[str, Any]]:
    """(servers key, entry) for an HTTP server at ``url``: a bearer token in the headers
    (``token``, an identity's; else the server's own)."""
    headers = {"Authorization": f"Bearer {token or mcp_token()}"}
    if client_name == "cursor":
        return "mcpServers", {"url": url, "headers": headers}
    if client_name == "claude-code":
        return "mcpServers", {"type": "http", "url": url, "headers": headers}
    if client_name == "vscode":
        return "servers", {"type": "http", "url": url, "headers": headers}
    raise InvalidInput(
        f"{client_name} takes local servers over stdio only",
        code="http-unsupported",
        hint="configure it without the HTTP URL (stdio), or use claude-code, cursor or vscode",
    )


def mcp_config(
    client_name: str = "claude",
    write: bool = False,
    http_url: str | None = None,
    token_file: Path | None = None,
) -> dict[str, Any]:
    """The MCP entry that runs `air-mcp`, in ``client_name``'s format; ``write`` merges it.

    With ``http_url`` the entry points at a running `air-mcp --transport http` and carries its
    bearer token (the written file is then made owner-only): the identity's in ``token_file``
    (`air mcp-token`: one agent, its project and limits), else the server's own. Returns
    ``text`` (what to paste or run), ``entry``, ``path`` (the client's config file),
    ``written`` (the path, when the file changed), ``backup`` (a copy of the file as it was),
    and ``action`` (created | updated | unchanged | printed).
    """
    if client_name not in MCP_CLIENTS:
        raise _unknown_client(client_name)
    if token_file is not None and not http_url:
        raise InvalidInput(
            "a token file is for an HTTP server",
            code="token-without-http",
            hint="add --http URL (the running `air-mcp --transport http`)",
        )
    if http_url:
        token = read_token_file(token_file) if token_file is not None else None
        key, entry = http_client_entry(client_name, http_url, token)
    else:
        key, entry = client_entry(client_name, server_entry())
    path = client_config_path(client_name)
    if client_name == "claude-code" and http_url:
        text = claude_code_http_command(http_url, token_file)
    elif client_name == "claude-code":
        text = claude_code_command(entry)
    else:
        text = json.dumps({key: {SERVER_NAME: entry}}, indent=2)
    result: dict[str, Any] = {
        "client": client_name,
        "text": text,
        "entry": entry,
        "path": str(path),
        "written": None,
        "backup": None,
        "action": "printed",
        # the shell's AIR_* settings the stdio server gets (an HTTP server has its own)
        "carried": [] if http_url else carried_settings(entry),
    }
    if write:
        action, backup = merge_config(path, key, entry)
        if http_url:
            os.chmod(path, 0o600)  # it now holds the token: keep it from other users
        result.update(
            action=action,
            written=str(path) if action != "unchanged" else None,
            backup=str(backup) if backup else None,
        )
    if token_file is not None and http_url:  # an identity's token stays in its files
        shown = f"Bearer <the token in {token_file}>"
        result["entry"] = {**entry, "headers": {"Authorization": shown}}
        result["text"] = result["text"].replace(f"Bearer {token}", shown)
    return result


def _read_config(path: Path, key: str, entry: dict[str, Any]) -> dict[str, Any] | None:
    """The parsed config (None when the file does not exist); refuses what it cannot parse."""
    paste = json.dumps({key: {SERVER_NAME: entry}}, indent=2)
    hint = f"fix the file by hand (nothing was changed), or add this entry yourself:\n{paste}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidState(
            f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
            code="config-unreadable",
            hint=hint,
            path=str(path),
        ) from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # VS Code accepts comments in its JSON; rewriting would drop them, so we do not
        comments = " (it has comments, which a rewrite would lose)" if "//" in text else ""
        raise InvalidState(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            f"{comments}; refusing to rewrite it",
            code="config-unparseable",
            hint=hint,
            path=str(path),
        ) from None
    if not isinstance(data, dict):
        raise InvalidState(
            f"{path} holds a JSON {type(data).__name__}, not an object; refusing to rewrite it",
            code="config-unparseable",
            hint=hint,
            path=str(path),
        )
    if key in data and not isinstance(data[key], dict):
        raise InvalidState(
            f"{path}: {key!r} is a {type(data[key]).__name__}, not an object of servers;"
            " refusing to rewrite it",
            code="config-unparseable",
            hint=hint,
            path=str(path),
        )
    return data


def merge_config(path: Path, key: str, entry: dict[str, Any]) -> tuple[str, Path | None]:
    """Put our server under ``data[key]["air"]``, keeping every other entry; back up first."""
    data = _read_config(path, key, entry)
    exists = data is not None
    data = data if data is not None else {}
    servers = data.setdefault(key, {})
    if servers.get(SERVER_NAME) == entry:
        return "unchanged", None
    action = "updated" if exists else "created"
    servers[SERVER_NAME] = entry
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    created: list[Path] = []
    backup: Path | None = None
    try:
        created = make_dirs(path.parent)
        if exists:
            backup = _backup_path(path)
            _private_copy(path, backup)
        _atomic_write(path, text)
    except OSError as exc:
        if backup is not None:
            backup.unlink(missing_ok=True)
        remove_dirs(created)
        raise AirError(
            f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}; nothing was changed",
            code="config-not-writable",
            hint="fix the folder's permissions, or paste the printed entry by hand",
            path=str(path),
        ) from None
    return action, backup


def _backup_path(path: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    return candidate


def _private_copy(src: Path, dest: Path) -> None:
    """Copy ``src`` to the new file ``dest``, owner-only from its creation (it may hold a
    token: shutil.copy2 would create it world-readable and fix the mode only after)."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(src.read_bytes())


def _atomic_write(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file beside it, created owner-only (mkstemp's
    0600, the final mode: client configs hold tokens), then renamed over it. The mode of the
    file it replaces is not copied: a 0644 config would show the token for a moment."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
