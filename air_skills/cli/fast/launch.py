"""`air launch ...` without typer or rich (issues 23, 41.5): for agents and scripts in a shell.

It reads the options `air launch` takes (cli/jobs.py), builds the spec with the same code
(cli/launch_spec.py) and launches through the same Client: ``launch_view`` for a spec plainly
valid without pydantic (models/spec_view.py), else ``launch(spec, dry_run, strict=True)``; the
same steps, errors (code, message, ``Next:``), idempotency and reply as the typer command: the
JSON with ``--json``, else the job's line (cli/lines.py), written as it is where rich would print
the same bytes (not a terminal) and through cli/output.py otherwise, after the launch.
Anything it does not read exactly as click would (an unknown option, ``--opt=value``, a value
that starts with ``-``, a number click would refuse, ``--watch``, ``--seeds``, ``--grid``,
``--variants``, ``--help``) goes to the typer app, before anything is done.
"""

from __future__ import annotations

import sys
from typing import Any

# option -> (parameter name, converter), as the typer command declares them
VALUES: dict[str, tuple[str, Any]] = {
    "--name": ("name", str),
    "--gpus": ("gpus", int),
    "--procs": ("procs", str),
    "--nodes": ("nodes", int),
    "--priority": ("priority", str),
    "--experiment": ("experiment", str),
    "--timeout-min": ("timeout_min", float),
    "--max-retries": ("max_retries", int),
    "--stall-timeout-min": ("stall_timeout_min", float),
    "--on-stall": ("on_stall", str),
    "--idempotency-key": ("idempotency_key", str),
    "--backend": ("backend", str),
    "--project": ("project", str),
    "--code": ("code", str),
    "--patch": ("patch", str),
    "--image": ("image", str),
    "--sandbox": ("sandbox", str),
    "--config-as": ("config_as", str),
}
LISTS = {"--set": "set_", "--data": "data", "--writable": "writable"}
FLAGS: dict[str, tuple[str, bool]] = {
    "--preemptible": ("preemptible", True),
    "--not-preemptible": ("preemptible", False),
    "--network": ("network", True),
    "--no-network": ("network", False),
    "--allow-duplicate": ("allow_duplicate", True),
    "--no-duplicate": ("allow_duplicate", False),
    "--dry-run": ("dry_run", True),
    "--no-check-command": ("no_check_command", True),
    "--json": ("as_json", True),
}


def parse(args: list[str]) -> tuple[list[str], list[str], dict[str, Any]] | None:
    """(positional args, the command after `--`, the options by parameter name) of
    ``launch ARGS``; None: the typer app reads them."""
    ours, command = list(args), []
    if "--" in args:
        cut = args.index("--")
        ours, command = list(args[:cut]), list(args[cut + 1 :])
    positional: list[str] = []
    given: dict[str, Any] = {name: [] for name in LISTS.values()}
    i = 0
    while i < len(ours):
        arg = ours[i]
        if arg in FLAGS:
            name, value = FLAGS[arg]
            given[name] = value
        elif arg in VALUES or arg in LISTS:
            if i + 1 >= len(ours) or (ours[i + 1].startswith("-") and ours[i + 1] != "-"):
                return None  # a missing value, or one click may read otherwise
            text = ours[i + 1]
            i += 1
            if arg in LISTS:
                given[LISTS[arg]].append(text)
            else:
                name, convert = VALUES[arg]
                try:
                    given[name] = convert(text)
                except ValueError:
                    return None  # click's usage error, in its words
        elif arg.startswith("-"):
            return None  # another option (--watch, --seeds, --help, --x=y): typer's
        else:
            positional.append(arg)
        i += 1
    return positional, command, given


def answer(args: list[str]) -> int | None:
    """The exit code after launching ``args`` (what follows `air launch`) here; None: the
    typer app answers them (nothing was done)."""
    asked = parse(args)
    if asked is None:
        return None
    from air_skills import settings
    from air_skills.cli.basics import _dump, client, emit_json, full_disk_named
    from air_skills.cli.launch_spec import launch_spec
    from air_skills.cli.lines import job_parts
    from air_skills.errors import AirError, render_json, render_text
    from air_skills.models.spec_view import quick_spec

    positional, command, given = asked
    try:
        with full_disk_named():  # as cli/output.py's handle_errors does it
            settings.check_all()
            spec = launch_spec(positional, command, given)
            dry_run = bool(given.get("dry_run"))
            # A plainly valid spec is checked and queued without pydantic (models/spec_view.py)
            view = None if dry_run else quick_spec(spec)
            launcher = client()
            info = launcher.launch_view(view) if view is not None else None
            if info is None:
                # strict: a command that would not start is an invalid-spec error (cli/jobs.py)
                info = launcher.launch(spec, dry_run=dry_run, strict=True)
    except AirError as exc:
        if given.get("as_json"):
            sys.stdout.write(render_json(exc) + "\n")
        else:
            _say(None, render_text(exc))
        return exc.exit_code
    if given.get("as_json"):
        emit_json(info)
    else:
        job = _dump(info)  # the JSON's fields, from a JobInfo or Client.launch_view's reply
        _say(job_parts(job["job_id"], job["status"], job["gpus"], job["message"]), "")
    return 0


def _say(parts: tuple[str, str, str] | None, error: str) -> None:
    """The job's line (``parts``) on stdout, or ``error`` on stderr, as the typer command
    prints them (cli/output.py's say): written here when that is plain text."""
    from air_skills.cli.lines import write_plain

    stream = sys.stdout if parts is not None else sys.stderr
    if write_plain(stream, "".join(parts) if parts is not None else error):
        return
    from air_skills.cli import output  # a terminal: its status coloured by rich

    if parts is not None:
        output.say(output.out, output.job_line(*parts))
    else:
        output.say(output.err, error)
