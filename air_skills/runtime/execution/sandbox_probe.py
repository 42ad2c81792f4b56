"""Whether bwrap can make a sandbox here: asked once, and a yes kept while what it hangs on holds.

Deciding ``sandbox: auto`` needs the answer, and a fresh ``air launch`` process would run bwrap
for it each time (a process, namespaces and a /proc: milliseconds on the launch path). A yes is
kept in the user's cache folder under a key of what it depends on: the bwrap program (real
path, inode, size, mtime), this boot, the uid and the kernel's user-namespace switches. A no is
never kept: it is asked again, so a machine that was fixed is seen at once. Stdlib only.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

# The answer per bwrap path, for this process.
_PROBED: dict[str, str | None] = {}
# What lets an unprivileged user make namespaces (each absent on some kernels).
_SWITCHES = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    "/proc/sys/kernel/random/boot_id",
)
_KEEP = 8  # keys kept in the cache file (one per bwrap program and boot)


def probe(path: str) -> str | None:
    """Why bwrap at ``path`` cannot make a sandbox (``None``: it can)."""
    if path in _PROBED:
        return _PROBED[path]
    key = _key(path)
    if key is not None and key in _remembered():
        _PROBED[path] = None
        return None
    why = _run(path)
    _PROBED[path] = why
    if why is None and key is not None:
        _remember(key)
    return why


def _run(path: str) -> str | None:
    argv = [path, "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} cannot run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return f"the kernel refused it ({said[-1] if said else f'exit {done.returncode}'})"
    return None


def _key(path: str) -> str | None:
    """What the answer for ``path`` depends on, as one line; None if it cannot be read."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    parts = [real, str(st.st_ino), str(st.st_size), str(st.st_mtime_ns), str(os.getuid())]
    for name in _SWITCHES:
        try:
            with open(name, "rb") as f:
                parts.append(f.read(64).strip().decode(errors="replace"))
        except OSError:
            parts.append("-")
    return " ".join(p.replace(" ", "_") for p in parts)


def cache_file() -> Path:
    """The user's cache file of bwrap keys that worked (XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "air-skills" / "sandbox-probe"


def _remembered() -> list[str]:
    try:
        return cache_file().read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def _remember(key: str) -> None:
    path = cache_file()
    lines = [k for k in _remembered() if k != key][-(_KEEP - 1) :] + [key]
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except OSError:  # a read-only home: asked again next time, nothing worse
        tmp.unlink(missing_ok=True)
