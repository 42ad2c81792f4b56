"""Running a typer app as the house wants: `--version`, plain help (no `<bool>` on flags), and
usage errors that honour `--json` (``{"error": ...}`` on stdout) with exit 2.

Used by `air` and `autoresearch` (their ``main``); `air-mcp` takes `--version` in argparse.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn


def version() -> str:
    """The installed air-skills version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("air-skills")
    except PackageNotFoundError:
        return "unknown"


def wants_json(args: list[str]) -> bool:
    """Whether ``--json`` is among our own arguments (not the job's command after ``--``)."""
    ours = args[: args.index("--")] if "--" in args else args
    return "--json" in ours


def run_app(app: Any, prog: str, argv: list[str] | None = None) -> NoReturn:
    """Run ``app`` (a typer.Typer) and exit with its code; a usage error (unknown option, bad
    value, missing argument) prints as ``[usage-error] ...`` or, with ``--json``, as the JSON
    error on stdout, and exits 2."""
    from typer._click.exceptions import ClickException
    from typer.exceptions import Abort

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["--version"], ["-V"]):
        sys.stdout.write(f"{prog} {version()}\n")
        sys.exit(0)
    try:
        code = app(args=args, prog_name=prog, standalone_mode=False)
    except ClickException as exc:
        sys.exit(_usage_error(exc, prog, args))
    except Abort:
        sys.stderr.write("Aborted.\n")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _usage_error(exc: Any, prog: str, args: list[str]) -> int:
    from air_skills.errors import InvalidInput, render_json

    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else prog
    error = InvalidInput(
        exc.format_message(),
        code="usage-error",
        hint=f"`{where} --help` lists the options and arguments",
    )
    if wants_json(args):
        sys.stdout.write(render_json(error) + "\n")
    else:
        exc.show()
    return 2
