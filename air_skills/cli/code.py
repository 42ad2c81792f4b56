"""`air` code-snapshot commands (rerun, diff, code export, gc), ``--patch`` and the code line.

Thin layers over ``Client.rerun`` and ``Client.code`` (runtime/code/code_ops.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from air_skills.cli.launch_spec import parse_value, read_patch, split_sets
from air_skills.cli.output import JsonOpt, client, emit_json, handle_errors, info_line, out, say

code_app = typer.Typer(help="A job's code snapshot: export it.", no_args_is_help=True)


def code_line(code: Any) -> str:
    """The snapshot in one line: digest, commit and branch, dirty, patched, files."""
    parts = [f"digest {code.digest[:12]}"]
    if code.commit:
        parts.append(f"commit {code.commit[:12]}" + (f" ({code.branch})" if code.branch else ""))
    parts.append("dirty" if code.dirty else "clean")
    if code.patched:
        parts.append("patched")
    parts.append(f"{code.files} files")
    return ", ".join(parts) + (f"; {code.note}" if code.note else "")


@handle_errors
def rerun(
    job: str = typer.Argument(..., help="the job whose snapshot and config run again"),
    set_: list[str] = typer.Option([], "--set", help="config override KEY=VALUE (YAML value)"),
    patch: Optional[str] = typer.Option(
        None, "--patch", help="a unified diff FILE (or -) on the same base, instead of its patch"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and show; launch nothing"),
    as_json: bool = JsonOpt,
) -> None:
    """Launch a job's code snapshot (not the tree as it is now) and config again."""
    config = {k: parse_value(v) for k, v in split_sets(set_, "--set").items()}
    text = read_patch(patch) if patch is not None else None
    # A dry run refuses a snapshot whose command would not start, as `air launch --dry-run`.
    info = client().rerun(job, config=config or None, patch=text, dry_run=dry_run, strict=dry_run)
    if as_json:
        emit_json(info)
    else:
        say(out, info_line(info))


@handle_errors
def diff(
    job_a: str = typer.Argument(...),
    job_b: str = typer.Argument(...),
    stat: bool = typer.Option(False, "--stat", help="only the files changed, not the diff"),
    as_json: bool = JsonOpt,
) -> None:
    """Config and code differences between two jobs (files with +/- counts, then the diff)."""
    result = client().code.diff(job_a, job_b)
    if as_json:
        emit_json(result)
        return
    say(out, f"--- {result['a']}\n+++ {result['b']}")
    if "command" in result:
        say(out, f"command: {result['command']['a']} -> {result['command']['b']}")
    for key, change in result["config"].items():
        say(out, f"config {key}: {change['a']!r} -> {change['b']!r}")
    if not result["config"]:
        say(out, "config: same")
    changes = result["code"]
    if changes is None:
        say(out, "code: no snapshot to compare (a job ran `code: live`)")
        return
    if changes["same"]:
        say(out, f"code: same (snapshot {changes['a']['digest'][:12]})")
        return
    n = len(changes["files"])
    say(
        out,
        f"code: {n} file{'s' if n != 1 else ''} changed, +{changes['added']} -{changes['removed']}",
    )
    for f in changes["files"]:
        counts = "binary" if f.get("binary") else f"+{f['added']} -{f['removed']}"
        say(out, f"  {f['status']:<8} {f['path']}  {f.get('mode') or counts}")
    if not stat and changes["diff"]:
        sys.stdout.write("\n" + changes["diff"])


@code_app.command("export")
@handle_errors
def export(
    job: str = typer.Argument(...),
    dest: Optional[Path] = typer.Argument(None, help="a new folder for the job's exact code"),
    branch: Optional[str] = typer.Option(
        None, "--branch", help="also commit it on this new branch (the checkout is untouched)"
    ),
    repo: Optional[Path] = typer.Option(
        None, "--repo", help="the repository for --branch (default: the one the job came from)"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Write a job's code as launched to DIR; --branch NAME commits it on a new branch."""
    result = client().code.export(job, dest=dest, branch=branch, repo=repo)
    if as_json:
        emit_json(result)
        return
    if "folder" in result:
        f = result["folder"]
        say(out, f"{job}: {f['files']} files written to {f['path']}")
    if "branch" in result:
        b = result["branch"]
        base = f" on {b['parent'][:12]}" if b["parent"] else " (no parent: base not in the repo)"
        say(out, f"{job}: branch {b['branch']} at {b['commit'][:12]}{base} in {b['repo']}")


@handle_errors
def gc(
    dry_run: bool = typer.Option(False, "--dry-run", help="say what would go; remove nothing"),
    older_than: Optional[float] = typer.Option(
        None,
        "--older-than",
        min=0,
        metavar="DAYS",
        help="remove finished jobs that ended more than DAYS ago (default AIR_GC_KEEP_DAYS)",
    ),
    keep_last: Optional[int] = typer.Option(
        None,
        "--keep-last",
        min=0,
        metavar="N",
        help="keep the N finished jobs that ended last (default AIR_GC_KEEP_JOBS)",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Remove finished jobs the retention policy does not keep (--older-than, --keep-last:
    folder, logs, index rows, MLflow run; a study's kept trials, best and baseline and jobs a
    live job references stay), code snapshots no job within AIR_SNAPSHOT_RETENTION_DAYS uses,
    and spare MLflow runs no supervisor keeps."""
    report = client().gc(dry_run=dry_run, older_than_days=older_than, keep_last=keep_last)
    if as_json:
        emit_json(report)
        return
    verb = "would remove" if dry_run else "removed"
    jobs = report["jobs"]
    if jobs["older_than_days"] is not None or jobs["keep_last"] is not None:
        kept = ", ".join(f"{n} {why}" for why, n in jobs["kept"].items() if n)
        say(
            out,
            f"{verb} {jobs['jobs_removed']} finished jobs ({jobs['bytes_freed'] / 1e6:.1f} MB,"
            f" {jobs['runs_deleted']} MLflow runs); kept {kept or 'none'}",
        )
        for error in jobs["errors"]:
            say(out, f"not removed: {error}")
    say(
        out,
        f"{verb} {report['manifests_removed']} snapshots, {report['blobs_removed']} files"
        f" ({report['bytes_freed'] / 1e6:.1f} MB), {report['views_removed']} job views; kept"
        f" {report['manifests_kept']} snapshots ({report['retention_days']:g}-day window)"
        + (f"; {verb} {report['spare_runs_ended']} spare MLflow runs no supervisor keeps"
           if report.get("spare_runs_ended") else ""),
    )  # fmt: skip
