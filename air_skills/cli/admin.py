"""`air` admin commands: quota set/ls/rm, skills install, mcp-config."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from air_skills.cli.output import JsonOpt, client, emit_json, err, handle_errors, out, plain, say
from air_skills.errors import InvalidInput

quota_app = typer.Typer(help="Per-project GPU quotas.", no_args_is_help=True)
skills_app = typer.Typer(
    help="Agent skills (SKILL.md) for Claude, Cursor, Codex.", no_args_is_help=True
)


@quota_app.command("set")
@handle_errors
def quota_set(
    project: str = typer.Argument(...),
    gpus_: int = typer.Option(..., "--gpus", help="GPUs the project is guaranteed"),
    as_json: bool = JsonOpt,
) -> None:
    """Give PROJECT a GPU quota (it may borrow idle GPUs beyond it)."""
    from air_skills.quotas import set_quota

    result = set_quota(client().store, project, gpus_)
    if as_json:
        emit_json(result)
    else:
        say(out, f"project {project}: quota {gpus_} GPUs")
        if result.get("warning"):
            say(err, Text.assemble(("warning", "yellow"), f": {result['warning']}"))


@quota_app.command("ls")
@handle_errors
def quota_ls(as_json: bool = JsonOpt) -> None:
    """Quotas and who uses what."""
    from air_skills.quotas import list_quotas, shared_gpus

    c = client()
    c.reconcile()  # counts as the settled jobs have them
    rows = list_quotas(c.store)
    if as_json:
        emit_json(rows)
        return
    t = Table()
    for col in ("project", "quota", "in use", "borrowing", "queued"):
        t.add_column(col)
    for r in rows:
        quota = "-" if r["quota"] is None else str(r["quota"])
        cells = (r["project"], quota, r["in_use"], r["borrowing"], r["queued"])
        t.add_row(*map(plain, cells))
    out.print(t)
    say(out, f"projects without a quota (-) share {shared_gpus(c.store)} GPUs")


@quota_app.command("rm")
@handle_errors
def quota_rm(project: str = typer.Argument(...), as_json: bool = JsonOpt) -> None:
    """Drop PROJECT's quota: its jobs then share what the other quotas leave."""
    from air_skills.quotas import remove_quota

    result = remove_quota(client().store, project)
    emit_json(result) if as_json else say(out, f"project {project}: quota removed")


@skills_app.command("install")
@handle_errors
def skills_install(
    target: str = typer.Option("claude", "--target", help="claude | cursor | codex | DIR"),
    project: bool = typer.Option(False, "--project", help="into this project, not the user's"),
    force: bool = typer.Option(False, "--force", help="overwrite locally changed files"),
    as_json: bool = JsonOpt,
) -> None:
    """Copy the AIR agent skills where an agent finds them."""
    from air_skills.integrations.skills import install_skills

    written = install_skills(target, project=project, force=force)
    if as_json:
        emit_json(written)
    else:
        for item in written["files"]:
            say(out, f"{item['action']:>9}  {item['path']}")
        say(err, f"skills: {', '.join(written['skills'])} in {written['dir']}")


@handle_errors
def mcp_config(
    client_name: str = typer.Argument("claude", help="claude | claude-code | cursor | vscode"),
    write: bool = typer.Option(False, "--write", help="merge into the client's config file"),
    http_url: str | None = typer.Option(
        None,
        "--http",
        metavar="URL",
        help="configure a running `air-mcp --transport http` (writes its token)",
    ),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="with --http: an identity's token (air mcp-token add)"
    ),
    identity: str | None = typer.Option(
        None, "--identity", help="with --http: make this identity (--project) and use its token"
    ),
    project: str | None = typer.Option(
        None, "--project", help="with --identity: the only project its launches use"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Print (or --write) the MCP config entry that runs air-mcp for a client."""
    from air_skills.integrations.mcp_config import mcp_config as make_config

    if identity is not None:
        token_file = _new_identity_token(identity, project, token_file, http_url)
    result = make_config(client_name, write=write, http_url=http_url, token_file=token_file)
    if as_json:
        emit_json(result)
    else:
        say(out, result["text"])
        if result.get("carried"):  # which of the shell's settings the server will see
            say(err, "carried from this shell: " + ", ".join(result["carried"]))
        if write:
            backup = result.get("backup") or "none"
            say(err, f"{result['action']}: {result['path']} (backup: {backup})")


def _new_identity_token(
    name: str, project: str | None, token_file: Path | None, http_url: str | None
) -> Path:
    """Make identity ``name`` in ``project``; its token goes to an owner-only file under
    AIR_HOME/mcp-tokens (never printed), whose path is returned."""
    if not http_url or project is None or token_file is not None:
        raise InvalidInput(
            "--identity makes an agent's identity for an HTTP server: it needs --http URL and"
            " --project P, and no --token-file",
            code="bad-identity-options",
            hint="air mcp-config CLIENT --http URL --identity NAME --project P",
        )
    from air_skills.cli.tokens import save_token

    c = client()
    return save_token(c.home, name, c.add_identity(name, project))
