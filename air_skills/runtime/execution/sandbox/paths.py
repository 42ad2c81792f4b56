"""What the base view hides from a job: its private /tmp, folders its uid cannot pass."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys
from pathlib import Path


def _named_paths(argv: list[str], user: tuple[int, int] | None = None) -> list[str]:
    """The absolute paths under /tmp a command names, as their folders (a script's siblings
    are its imports; a file not made yet will appear there), or the file itself when its
    folder is /tmp (kept private). Elsewhere the root's view shows them already: a bind less
    is a mount less on the launch path."""
    out: list[str] = []
    for arg in argv[1:]:
        if not arg.startswith("/") or "\x00" in arg:
            continue
        real = os.path.realpath(arg)
        if not os.path.exists(real):  # one it will look for: the folder it would be in
            real = os.path.dirname(real)
            if not os.path.isdir(real):
                continue
        if os.path.isfile(real):
            folder = os.path.dirname(real)
            real = real if folder in ("/", "/tmp") else folder
        elif not os.path.isdir(real) or real in ("/", "/tmp"):
            continue
        if _out_of_sight(real, user) and real not in out:
            out.append(real)
    return out


def _out_of_sight(real: str, user: tuple[int, int] | None) -> bool:
    """Whether the base view does not show ``real`` to the job: under its private /tmp, or
    below a folder the job's uid cannot pass (root's 0700 home: see _unsearchable)."""
    return _hidden(real) or (user is not None and not _reachable(real, user))


def _reachable(real: str, user: tuple[int, int]) -> bool:
    parts = real.strip("/").split("/")
    return all(_passable("/" + "/".join(parts[:i]), user) for i in range(1, len(parts) + 1))


def _hidden(real: str) -> bool:
    """Whether the sandbox's base view hides ``real``: under its private /tmp."""
    return real != "/tmp" and inside(real, "/tmp")


@functools.lru_cache(maxsize=64)
def program_paths(program: str, user: tuple[int, int] | None = None) -> tuple[str, ...]:
    """What the job's program needs that may lie under /tmp, which is private in the sandbox:
    its virtual environment (or its folder), the interpreter's, and this toolkit's checkout (an
    editable install imports from it), all read-only. Elsewhere the root's view shows them."""
    found = program if program.startswith("/") else shutil.which(program)
    places: list[str] = []
    for exe in (found, sys.executable):
        if not exe:
            continue
        bindir = os.path.dirname(os.path.abspath(exe))
        root = os.path.dirname(bindir)
        places.append(root if os.path.exists(os.path.join(root, "pyvenv.cfg")) else bindir)
        bin_real = os.path.dirname(os.path.realpath(exe))
        places.append(bin_real)
        if os.path.basename(bin_real) == "bin":  # its prefix: the standard library
            places.append(os.path.dirname(bin_real))
        shim_root = os.path.dirname(bin_real)  # a pyenv shim execs $PYENV_ROOT/libexec/pyenv,
        if os.path.basename(bin_real) == "shims" and os.path.isfile(  # then a version of it
            os.path.join(shim_root, "libexec", "pyenv")
        ):
            places.append(shim_root)
    places += [sys.prefix, sys.base_prefix]
    places.append(str(Path(__file__).resolve().parents[4]))  # the folder holding air_skills/
    out: list[str] = []
    for place in places:
        real = os.path.realpath(place)
        if _out_of_sight(real, user) and os.path.isdir(real) and real not in out:
            out.append(real)
    return tuple(p for p in out if not any(o != p and inside(p, o) for o in out))


def _real_dir(path: str) -> str | None:
    real = os.path.realpath(path)
    return real if os.path.isdir(real) else None


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both real paths)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=256)
def _passable_at(folder: str, uid: int, gid: int, mode: int, owner: int, group: int) -> bool:
    if owner == uid:
        return bool(mode & stat.S_IXUSR)
    if group == gid:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)


def _passable(folder: str, user: tuple[int, int]) -> bool:
    try:
        st = os.stat(folder)
    except OSError:
        return True  # not there: nothing to hide
    return _passable_at(folder, *user, st.st_mode, st.st_uid, st.st_gid)
