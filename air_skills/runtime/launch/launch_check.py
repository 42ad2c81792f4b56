"""A launch's look at the command: its executable on PATH, its script file in the workdir.

``pyhton train.py`` or a misspelt ``trian.py`` is caught before anything queues, with a
did-you-mean from PATH or from the script's folder: a real launch refuses what a dry run
refuses (exit 2, nothing queued), unless the spec says ``check_command: false`` (a job that
creates its script at run time). Stdlib only.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidSpec

SCRIPT_SUFFIXES = (".py", ".sh")
# Options of python that take the next argument as their value, and those that end the
# options with no script (code or a module instead).
_PY_VALUE_OPTIONS = ("-W", "-X", "-Q")
_PY_NO_SCRIPT = ("-c", "-m", "-")
_PYTHON = re.compile(r"python[0-9.]*$")
MAX_LISTED = 5_000  # names looked at per folder for a did-you-mean


def check_command(spec: Any, snapshot: Any = None) -> list[str]:
    """Why a resolved JobSpec's command would not start (empty when it would).

    ``snapshot``: a rerun's stored snapshot, whose files count as the workdir's. The
    executable is looked up only where it runs here: not in a container image, not on a Ray
    cluster; the script in every case (the workdir is what the job gets).
    """
    created = _created_by(spec.patch) if spec.patch else set()
    if snapshot is not None:
        has_file = snapshot_has(snapshot.manifest["files"], snapshot.cwd, created)
    else:
        has_file = _ends_like(created)
    problems = command_problems(
        spec.command,
        spec.workdir,
        env_path=(spec.env or {}).get("PATH"),
        check_executable=spec.image is None and spec.backend == "local",
        has_file=has_file,
    )
    cwd = snapshot.cwd if snapshot is not None else None
    return problems + _removed_scripts(spec.command, spec.patch, cwd) if spec.patch else problems


def _removed_scripts(command: list[str], patch: str, cwd: str | None) -> list[str]:
    """The command's scripts that the patch deletes or renames away: what it would do, as a
    problem (the job would fail with "can't open file"; issue 39.4)."""
    from air_skills.runtime.code.patch import parse_patch

    try:
        files = parse_patch(patch)
    except InvalidSpec:
        return []  # a bad patch is refused by the code plan, with its own words
    gone = {fp.old_path: fp.new_path for fp in files if fp.old_path and fp.new_path != fp.old_path}
    out = []
    for script in script_args(command):
        rel = posixpath.normpath(posixpath.join(cwd, script)) if cwd is not None else None
        for old, new in gone.items():
            if old == rel or (rel is None and (old == script or old.endswith("/" + script))):
                what = "deletes it" if new is None else f"renames it to {new}"
                out.append(
                    f"{script}: the patch {what} (--- {old} / +++ {new or '/dev/null'}), so the"
                    " command would not find it; patch the script in place"
                )
    return out


def program_path(command: list[str], workdir: str, env_path: str | None = None) -> str | None:
    """The absolute path the command's program resolves to, as the job's PATH finds it (a
    dry run shows which python a job would run: one without torch fails late)."""
    program = command[0] if command else ""
    if not program:
        return None
    if "/" in program:
        full = os.path.realpath(os.path.join(workdir, program))
        return full if os.path.isfile(full) else None
    path = env_path if env_path is not None else os.environ.get("PATH", os.defpath)
    found = shutil.which(program, path=path)
    return os.path.abspath(found) if found else None


def refuse(problems: list[str], dry_run: bool = True) -> InvalidSpec:
    """The error of a launch (or strict dry run) whose command would not start: every problem
    at once."""
    return InvalidSpec(
        ("dry run: " if dry_run else "") + "the command would not start:",
        problems=problems,
        hint="fix the command or its workdir (argv[0] is looked up on the job's PATH, a"
        " script relative to the workdir); nothing was launched. A job that creates its"
        " script at run time: --no-check-command (spec: check_command: false)",
    )


def _created_by(patch: str) -> set[str]:
    """The files a patch creates or changes (paths from the tree's root)."""
    from air_skills.runtime.code.patch import parse_patch

    try:
        return {fp.new_path for fp in parse_patch(patch) if fp.new_path}
    except InvalidSpec:
        return set()  # a bad patch is refused by the code plan, with its own words


def _ends_like(created: set[str]) -> Callable[[str], bool]:
    """Without the snapshot's place in the tree: a created path that ends with the script."""
    return lambda script: any(p == script or p.endswith("/" + script) for p in created)


def command_problems(
    command: list[str],
    workdir: str,
    *,
    env_path: str | None = None,
    check_executable: bool = True,
    has_file: Callable[[str], bool] | None = None,
) -> list[str]:
    """Why ``command`` would not start from ``workdir`` (one line each; empty when it would).

    ``env_path``: the job's PATH (its env's, else this process's); ``check_executable``
    false where the program runs elsewhere (a container, a cluster). ``has_file`` answers
    for a path relative to the workdir that the job's code has although the folder does not
    (a rerun's stored snapshot, a file the patch creates).
    """
    problems = []
    if check_executable:
        problem = _executable_problem(command[0], workdir, env_path)
        if problem:
            problems.append(problem)
    for script in script_args(command):
        if _exists(script, workdir) or (has_file is not None and has_file(script)):
            continue
        where = Path(workdir, script).parent
        problems.append(
            f"{script}: no such file in {where}" + _did_you_mean(Path(script).name, _names(where))
        )
    return problems


def script_args(command: list[str]) -> list[str]:
    """The arguments that name script files: ``*.py``/``*.sh``, and python's script."""
    out = []
    args = command[1:]
    if _PYTHON.match(Path(command[0]).name):
        skip = False
        for arg in args:
            if skip:
                skip = False
            elif arg in _PY_NO_SCRIPT:
                break
            elif arg in _PY_VALUE_OPTIONS:
                skip = True
            elif not arg.startswith("-"):
                out.append(arg)
                break
    for arg in args:
        looks = arg.endswith(SCRIPT_SUFFIXES) and not arg.startswith("-") and "=" not in arg
        if looks and arg not in out:
            out.append(arg)
    return out


def _exists(path: str, workdir: str) -> bool:
    return os.path.exists(os.path.join(workdir, path))


def _executable_problem(program: str, workdir: str, env_path: str | None) -> str | None:
    if "/" in program:  # a path: relative ones start from the workdir, as the job does
        full = os.path.join(workdir, program)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return None
        why = "is not executable" if os.path.isfile(full) else "does not exist"
        return f"{program}: {why} (looked in {os.path.dirname(full) or workdir})"
    path = env_path if env_path is not None else os.environ.get("PATH", os.defpath)
    if shutil.which(program, path=path):
        return None
    return f"{program}: not found on PATH" + _did_you_mean(program, _on_path(path))


def _on_path(path: str) -> Iterator[str]:
    for folder in path.split(os.pathsep):
        yield from _names(Path(folder or "."))


def _names(folder: Path) -> Iterator[str]:
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_LISTED:
                    return
                yield entry.name
    except OSError:
        return


def _did_you_mean(name: str, candidates: Iterator[str]) -> str:
    import difflib  # a missing program only

    close = difflib.get_close_matches(name, list(dict.fromkeys(candidates)), n=1, cutoff=0.7)
    return f"; did you mean {close[0]}?" if close else ""


def snapshot_has(files: dict[str, object], cwd: str, created: set[str]) -> Callable[[str], bool]:
    """``has_file`` for a snapshot's files (relative to its root; ``cwd`` is the workdir's
    place in it) and the files a patch creates."""

    def has(script: str) -> bool:
        rel = posixpath.normpath(posixpath.join(cwd, script))
        return rel in files or rel in created

    return has
