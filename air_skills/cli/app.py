"""The ``air`` command: a thin layer over ``air_skills.Client``. Every command takes --json.

The commands live by topic (``jobs``, ``results``, ``gpus``, ``admin``, ``code``); this module
names them, in the order `air --help` lists them, and runs the app.
"""

from __future__ import annotations

import typer

from air_skills.cli import admin, code, gpus, images, jobs, results, tokens
from air_skills.cli.usage import run_app

app = typer.Typer(
    help="AIR Skills: launch, watch and cancel ML jobs on GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: no `<bool>` after flags, no rich import for it
)
app.add_typer(admin.quota_app, name="quota")
app.add_typer(admin.skills_app, name="skills")

app.command(
    cls=jobs.LaunchCommand,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": False},
)(jobs.launch)
app.command("ls")(jobs.ls)
for command in (
    jobs.status,
    results.logs,
    results.metrics,
    results.compare,
    jobs.wait,
    jobs.cancel,
):
    app.command()(command)
for command in (gpus.gpus, gpus.cordon, gpus.uncordon, gpus.doctor, jobs.ui, images.images):
    app.command()(command)
app.command("mcp-config")(admin.mcp_config)
app.add_typer(tokens.tokens_app, name="mcp-token")
for command in (code.rerun, code.diff, code.gc):
    app.command()(command)
app.add_typer(code.code_app, name="code")


def main() -> None:
    """`air`: --version, usage errors in the requested format (cli/usage.py), exit codes."""
    run_app(app, "air")


if __name__ == "__main__":
    main()
