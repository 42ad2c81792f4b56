"""`air mcp-token add|ls|revoke`: identities for the agents that share this pool over HTTP."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from air_skills.cli.output import JsonOpt, client, emit_json, handle_errors, out, say

tokens_app = typer.Typer(
    help="Identities of air-mcp's HTTP callers: a token per agent, with its project and limits.",
    no_args_is_help=True,
)


@tokens_app.command("add")
@handle_errors
def token_add(
    name: str = typer.Argument(..., help="the identity's name (shown as launched_by)"),
    project: str = typer.Option(..., "--project", help="the only project its launches use"),
    max_gpus: Optional[int] = typer.Option(
        None, "--max-gpus", help="GPUs its queued and running jobs may ask for at once"
    ),
    priority_max: str = typer.Option(
        "high", "--priority-max", help="the highest priority it may launch at: low|normal|high"
    ),
    admin: bool = typer.Option(
        False, "--admin", help="may cancel any identity's jobs and read every project's logs"
    ),
    backend: Optional[list[str]] = typer.Option(
        None, "--backend", help="a backend it may use (repeat; default: local only)"
    ),
    allow_unsandboxed: bool = typer.Option(
        False,
        "--allow-unsandboxed",
        help="may run without a sandbox (sandbox: off, code: live, the ray backend)",
    ),
    data_root: Optional[list[str]] = typer.Option(
        None,
        "--data-root",
        help="a folder its workdir, data and writable folders may lie in (repeat;"
        " default: AIR_DATA_ROOTS)",
    ),
    read_project: Optional[list[str]] = typer.Option(
        None,
        "--read-project",
        help="another project whose logs and metrics it may read (repeat; '*': every one)",
    ),
    save: bool = typer.Option(
        False,
        "--save",
        help="keep the token in AIR_HOME/mcp-tokens/NAME (hidden from every job) instead of"
        " printing it",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Make an identity; its token is printed once (stored only as a hash), or kept with --save."""
    c = client()
    token = c.add_identity(
        name,
        project,
        max_gpus=max_gpus,
        priority_max=priority_max,
        admin=admin,
        backends=backend or ("local",),
        unsandboxed=allow_unsandboxed,
        data_roots=data_root or (),
        read_projects=read_project or (),
    )
    if save:
        path = save_token(c.home, name, token)
        if as_json:
            emit_json({"name": name, "project": project, "token_file": str(path)})
            return
        say(out, f"identity {name} (project {project}); its token is in {path} (owner-only)")
        say(out, f"give it to the agent: air mcp-config CLIENT --http URL --token-file {path}")
        return
    if as_json:
        emit_json({"name": name, "project": project, "token": token})
        return
    say(out, f"identity {name} (project {project}); its token, shown this once:")
    out.print(token, markup=False, highlight=False)
    say(
        out,
        "keep it where no job can read it (AIR_HOME/mcp-tokens/, or use --save), then:"
        " air mcp-config CLIENT --http URL --token-file F",
    )


def save_token(home: Path, name: str, token: str) -> Path:
    """``token`` in AIR_HOME/mcp-tokens/NAME, owner-only from its first byte: AIR_HOME is
    hidden from every sandboxed job, so no job can read another agent's token there."""
    folder = home / "mcp-tokens"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return path


@tokens_app.command("ls")
@handle_errors
def token_ls(as_json: bool = JsonOpt) -> None:
    """Identities, their limits and the GPUs their live jobs hold."""
    rows = client().identities()
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        state = "revoked" if r["revoked_at"] else ("admin" if r["admin"] else "active")
        limit = "-" if r["max_gpus"] is None else str(r["max_gpus"])
        rights = ",".join(r["backends"]) + (" unsandboxed" if r["unsandboxed"] else " sandboxed")
        say(
            out,
            f"{r['name']:<20} {r['project']:<12} gpus {r['gpus_in_use']}/{limit:<4}"
            f" priority<={r['priority_max']:<6} {state:<8} {rights}",
        )


@tokens_app.command("revoke")
@handle_errors
def token_revoke(name: str = typer.Argument(...), as_json: bool = JsonOpt) -> None:
    """Revoke an identity's token: its next request is refused."""
    client().revoke_identity(name)
    if as_json:
        emit_json({"name": name, "revoked": True})
    else:
        say(out, f"identity {name}: token revoked")
