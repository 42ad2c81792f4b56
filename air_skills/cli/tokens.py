"""`air mcp-token add|ls|revoke`: identities for the agents that share this pool over HTTP."""

from __future__ import annotations

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
    admin: bool = typer.Option(False, "--admin", help="may cancel any identity's jobs"),
    as_json: bool = JsonOpt,
) -> None:
    """Make an identity; its token is printed once (stored only as a hash)."""
    token = client().add_identity(
        name, project, max_gpus=max_gpus, priority_max=priority_max, admin=admin
    )
    if as_json:
        emit_json({"name": name, "project": project, "token": token})
        return
    say(out, f"identity {name} (project {project}); its token, shown this once:")
    out.print(token, markup=False, highlight=False)
    say(out, "give it to the agent's MCP client: air mcp-config CLIENT --http URL --token-file F")


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
        say(
            out,
            f"{r['name']:<20} {r['project']:<12} gpus {r['gpus_in_use']}/{limit:<4}"
            f" priority<={r['priority_max']:<6} {state}",
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
