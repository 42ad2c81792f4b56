"""``autoresearch host``: run many studies in one process (run, add, ls, stop).

Built by ``commands(guard)`` with the ``autoresearch`` command's error guard, so errors print
as every other command's do. Imports stay inside the commands: ``autoresearch --help`` and the
other commands do not load the loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

HostDirOpt = typer.Option(None, "--host-dir", help="the host folder (default AIR_HOME/host)")
JsonOpt = typer.Option(False, "--json", help="print JSON for agents and scripts")


def commands(guard: Callable[..., Any]) -> typer.Typer:
    """The ``host`` sub-command group."""
    host_app = typer.Typer(
        help="Many studies in one process: each with its own folder, journal and budget.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
    )

    @host_app.command("run")
    @guard
    def run(host_dir: Path | None = HostDirOpt, as_json: bool = JsonOpt) -> None:
        """Run every study in the host folder's specs/ (and each one added later) until
        SIGTERM or Ctrl-C; a study that had not stopped resumes from its journal."""
        import time

        from autoresearch.host.host import StudyHost
        from autoresearch.study.host_folder import host_dir as folder_of

        def say(line: str) -> None:
            if not as_json:
                print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

        host = StudyHost(folder_of(host_dir), log=say)
        host.run()
        if as_json:
            print(json.dumps({"host_dir": str(host.dir), "studies": host.outcome}, indent=2))
        if any(t.is_alive() for t in host.threads.values()):
            # a study still inside a step (an LLM call, a launch) past the stop's grace: end
            # now, as a kill would; its journal resumes it on the next `host run`
            import os
            import sys

            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    @host_app.command("add")
    @guard
    def add(
        studies: list[Path] = typer.Argument(..., help="study YAML files"),
        study_dir: Path | None = typer.Option(
            None, "--dir", help="study folder, for one study (default AIR_HOME/studies/<name>/)"
        ),
        resume: bool = typer.Option(
            False, "--resume", help="the study folder holds a journal: continue it"
        ),
        host_dir: Path | None = HostDirOpt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Check study files and hand them to the host (a running host starts each within
        seconds; otherwise the next `autoresearch host run` does). All are checked before any
        is added."""
        from air_skills.errors import InvalidInput
        from autoresearch.study.host_folder import add_specs, host_alive
        from autoresearch.study.host_folder import host_dir as folder_of

        if study_dir is not None and len(studies) > 1:
            raise InvalidInput(
                f"--dir names one study's folder; {len(studies)} study files were given",
                hint="add them one by one with --dir, or without --dir",
            )
        folder = folder_of(host_dir)
        added = add_specs(folder, studies, study_dir, resume)
        running = bool(host_alive(folder))
        if as_json:
            print(json.dumps({"added": added, "host_running": running}, indent=2))
            return
        when = "the host starts it" if running else "`autoresearch host run` starts it"
        for done in added:
            print(f"study {done['study']} added ({done['study_dir']}): {when}")

    @host_app.command("ls")
    @guard
    def ls(host_dir: Path | None = HostDirOpt, as_json: bool = JsonOpt) -> None:
        """The host's studies: state, trials used of the budget, best, folder."""
        from autoresearch.host.status import host_status

        view = host_status(host_dir)
        if as_json:
            print(json.dumps(view, indent=2, default=str))
            return
        alive = view["host"]
        state = f"running (pid {alive['pid']})" if alive else "not running"
        print(f"host {view['host_dir']}: {state}")
        for s in view["studies"]:
            trials = f"{s['trials_used']}/{s['trials_limit']}" if s.get("trials_limit") else "-"
            best = "" if s.get("best") is None else f"  best {s['best']:.5g}"
            print(f"  {s['name']:<24} {s['state']:<12} trials {trials:<8}{best}  {s['study_dir']}")
            if s["state"] in ("failed", "unreadable") and s.get("error"):
                print(f"    {s['error'][:300]}")

    @host_app.command("stop")
    @guard
    def stop(
        name: str = typer.Argument(..., help="the study's name"),
        keep_running: bool = typer.Option(
            False, "--keep-running", help="let running trials finish; launch no more"
        ),
        reason: str | None = typer.Option(None, "--reason", help="why, for the journal"),
        host_dir: Path | None = HostDirOpt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Stop one study of the host (the others go on); it stays stopped after a restart."""
        from autoresearch.host.status import stop_hosted

        summary = stop_hosted(host_dir, name, keep_running=keep_running, reason=reason)
        if as_json:
            print(json.dumps(summary, indent=2, default=str))
            return
        print(f"study {summary['name']}: {summary['state']}"
              + (f" ({summary['stop_reason']})" if summary.get("stop_reason") else ""))  # fmt: skip

    return host_app
