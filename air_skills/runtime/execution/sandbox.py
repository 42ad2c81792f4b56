"""A job's sandbox: its command wrapped in bubblewrap (``bwrap``), so it can change only its folder.

What a sandboxed job sees: the whole filesystem read-only; its own job folder (checkpoints,
outputs, logs, its private code view) writable; a private ``/tmp``; the folders its spec names
in ``writable``; its data inputs read-only at the real paths checked at start. ``AIR_HOME`` is
hidden beyond the job's folder (no ``air.db``, code store, other jobs, studies, MLflow store).
``network: false`` gives it a network namespace of its own (loopback only). A gang runs whole
(torchrun and every rank) in one sandbox. Stdlib only: the supervisor builds on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from air_skills import settings

# What a job's record says when it ran in one (``JobInfo.sandbox``).
KIND = "bwrap"
# The probe's answer per bwrap path, for this process (a launcher asks once).
_PROBED: dict[str, str | None] = {}


class SandboxUnavailable(OSError):
    """A job that must run sandboxed cannot be: no bwrap, or the kernel refuses it."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"no sandbox can be made ({reason}) and the job asks for one (sandbox: on)"
        )
        self.reason = reason


def bwrap_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The bwrap program AIR_BWRAP names, found on the environment's PATH; None if missing."""
    env = os.environ if environ is None else environ
    name = settings.get("AIR_BWRAP", env) or ""
    if not name:
        return None
    return shutil.which(name, path=env.get("PATH", os.defpath))


def unavailable(environ: Mapping[str, str] | None = None) -> str | None:
    """Why no sandbox can be made here (``None``: one can). Probes bwrap once per process."""
    path = bwrap_path(environ)
    if path is None:
        name = settings.get("AIR_BWRAP", os.environ if environ is None else environ)
        return f"{name or 'bwrap'} not found on PATH: install bubblewrap"
    if path not in _PROBED:
        _PROBED[path] = _probe(path)
    return _PROBED[path]


def _probe(path: str) -> str | None:
    argv = [path, "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} cannot run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return f"the kernel refused it ({said[-1] if said else f'exit {done.returncode}'})"
    return None


def describe(spec: Mapping[str, object]) -> str | None:
    """What a job's record says of its sandbox: ``bwrap``, ``bwrap, no network`` or
    ``none (reason)``; None for a spec from before sandboxes (or another backend's)."""
    mode = spec.get("sandbox")
    if mode == "on":
        return KIND + ("" if spec.get("network", True) else ", no network")
    if mode == "off":
        tags = spec.get("tags")
        note = tags.get("air.sandbox") if isinstance(tags, Mapping) else None
        return f"none ({note or 'sandbox: off'})"
    return None


def _real_dir(path: str) -> str | None:
    real = os.path.realpath(path)
    return real if os.path.isdir(real) else None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def wrap(
    argv: list[str],
    *,
    bwrap: str,
    home: Path,
    jdir: Path,
    cwd: str | None,
    workdir: str | None = None,
    data: Iterable[str] = (),
    writable: Iterable[str] = (),
    network: bool = True,
) -> list[str]:
    """``argv`` run by bwrap with the job's view (module docstring); mounts in order, the
    later over the earlier."""
    home_real = os.path.realpath(home)
    out = [bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev"]
    out += ["--unshare-pid", "--proc", "/proc", "--tmpfs", "/tmp"]
    if not network:
        out.append("--unshare-net")
    # Its workdir (and a live job's cwd) may lie under /tmp, now private: seen read-only.
    for path in dict.fromkeys(p for p in (workdir, cwd) if p):
        real = _real_dir(path)
        if real and real != "/":  # AIR_HOME inside it is hidden next
            out += ["--ro-bind", real, real]
    out += ["--tmpfs", home_real]  # AIR_HOME: nothing of it but the job's own folder
    for real in data:  # checked against the roots at start (tracking/data.recheck_at_start)
        if not _inside(real, home_real):
            out += ["--ro-bind", real, real]
    for path in writable:
        real = _real_dir(path)
        if real and not _inside(real, home_real) and not _inside(home_real, real):
            out += ["--bind", real, real]
    jreal = os.path.realpath(jdir)
    out += ["--bind", jreal, jreal]
    if cwd:
        out += ["--chdir", cwd]
    return [*out, "--", *argv]


def signal_status(rc: int) -> int:
    """bwrap reports a command killed by signal N as exit 128+N: back to Popen's ``-N``."""
    return -(rc - 128) if 128 < rc <= 128 + 64 else rc
