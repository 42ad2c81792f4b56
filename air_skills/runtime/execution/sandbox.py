"""A job's sandbox: its command wrapped in bubblewrap (``bwrap``), so it can change only its folder.

What a sandboxed job sees: the whole filesystem read-only; its own job folder (checkpoints,
outputs, logs, its private code view) writable; a private ``/tmp``; the folders its spec names
in ``writable``; its data inputs read-only at the real paths checked at start. ``AIR_HOME`` is
hidden beyond the job's folder (no ``air.db``, code store, other jobs, studies, MLflow store).
``network: false`` gives it a network namespace of its own (loopback only). A gang runs whole
(torchrun and every rank) in one sandbox. Stdlib only: the supervisor builds on it.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.home import open_job_file
from air_skills.runtime.execution import sandbox_probe

# What a job's record says when it ran in one (``JobInfo.sandbox``).
KIND = "bwrap"


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
    return _which(name, env.get("PATH", os.defpath))


@functools.lru_cache(maxsize=16)
def _which(name: str, path: str) -> str | None:
    """shutil.which, once per (name, PATH) for this process: a supervisor starts many jobs."""
    return shutil.which(name, path=path)


def unavailable(environ: Mapping[str, str] | None = None) -> str | None:
    """Why no sandbox can be made here (``None``: one can); sandbox_probe.py asks bwrap."""
    path = bwrap_path(environ)
    if path is None:
        name = settings.get("AIR_BWRAP", os.environ if environ is None else environ)
        return f"{name or 'bwrap'} not found on PATH: install bubblewrap"
    return sandbox_probe.probe(path)


def describe(spec: Mapping[str, object]) -> str | None:
    """What a job's record says of its sandbox: ``bwrap``, ``bwrap, no network`` or
    ``none (reason)``; None for a spec from before sandboxes (or another backend's)."""
    mode = spec.get("sandbox")
    if mode == "on" and spec.get("image"):
        return "container"  # the engine's: bwrap does not wrap it (metrics still relayed)
    if mode == "on":
        return KIND + ("" if spec.get("network", True) else ", no network")
    if mode == "off":
        tags = spec.get("tags")
        note = tags.get("air.sandbox") if isinstance(tags, Mapping) else None
        return f"none ({note or 'sandbox: off'})"
    return None


def _named_paths(argv: list[str]) -> list[str]:
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
        if _hidden(real) and real not in out:
            out.append(real)
    return out


def _hidden(real: str) -> bool:
    """Whether the sandbox's base view hides ``real``: under its private /tmp."""
    return real != "/tmp" and inside(real, "/tmp")


@functools.lru_cache(maxsize=64)
def program_paths(program: str) -> tuple[str, ...]:
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
        places.append(os.path.dirname(os.path.realpath(exe)))
    places.append(sys.prefix)
    places.append(str(Path(__file__).resolve().parents[3]))  # the folder holding air_skills/
    out: list[str] = []
    for place in places:
        real = os.path.realpath(place)
        if _hidden(real) and os.path.isdir(real) and real not in out:
            out.append(real)
    return tuple(out)


def _real_dir(path: str) -> str | None:
    real = os.path.realpath(path)
    return real if os.path.isdir(real) else None


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both real paths)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@dataclass(frozen=True)
class View:
    """A job's sandbox as bwrap makes it: ``base``, bwrap with the options every job of its
    kind shares (namespaces, capabilities, /, /dev, /proc, /tmp); then ``mounts``, in order,
    the later over the earlier, each ``(option, source, destination)`` (source "" for a
    tmpfs); then the folder it starts in. sandbox_ahead.py makes the base before the job is
    known and the mounts when it is."""

    base: tuple[str, ...]
    mounts: tuple[tuple[str, str, str], ...]
    chdir: str | None

    def argv(self, command: list[str]) -> list[str]:
        """The whole bwrap command line that runs ``command`` in this view."""
        out = [*self.base, *mount_args(self.mounts)]
        if self.chdir:
            out += ["--chdir", self.chdir]
        return [*out, "--", *command]


def mount_args(mounts: Iterable[tuple[str, str, str]]) -> list[str]:
    """bwrap's arguments for ``mounts`` (View.mounts), in their order."""
    out: list[str] = []
    for option, src, dst in mounts:
        out += [option, dst] if option == "--tmpfs" else [option, src, dst]
    return out


def base_args(
    bwrap: str,
    *,
    dev: Iterable[str] = ("--dev-bind", "/dev", "/dev"),
    network: bool = True,
    die_with_parent: bool = False,
) -> tuple[tuple[str, ...], list[tuple[str, str, str]]]:
    """bwrap and its options for every job of this kind, and the device nodes ``dev`` (bwrap's
    arguments for /dev: sandbox_devices.py) binds on top, as mounts."""
    dev = list(dev)
    head = dev[:3] if dev[0] == "--dev-bind" else dev[:2]  # the host's /dev, or a fresh one
    rest = dev[len(head) :]
    nodes = [(rest[i], rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]
    out = [bwrap, "--ro-bind", "/", "/", *head]
    if die_with_parent:
        out.append("--die-with-parent")
    # Run as root, bwrap would leave the job every capability: it could unmount the tmpfs
    # hiding AIR_HOME, or remount / writable. No capability, whoever runs it.
    out += ["--cap-drop", "ALL", "--unshare-pid", "--proc", "/proc", "--tmpfs", "/tmp"]
    if not network:
        out.append("--unshare-net")
    return tuple(out), nodes


def wrap(argv: list[str], **how: Any) -> list[str]:
    """``argv`` run by bwrap with the job's view (module docstring): view()'s whole argv."""
    return view(argv, **how).argv(argv)


def view(
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
    readonly: Iterable[str] = (),
    die_with_parent: bool = False,
    kept: Iterable[str | os.PathLike[str]] = (),
    dev: Iterable[str] = ("--dev-bind", "/dev", "/dev"),
) -> View:
    """The job's view (module docstring); mounts in order, the later over the earlier.
    ``dev``: how /dev is made (sandbox_devices.py: a GPU job's)."""
    home_real = os.path.realpath(home)
    base, out = base_args(bwrap, dev=dev, network=network, die_with_parent=die_with_parent)

    def ro(real: str) -> None:
        out.append(("--ro-bind", real, real))

    # Its workdir (and a live job's cwd) may lie under /tmp, now private: seen read-only.
    for path in dict.fromkeys(p for p in (workdir, cwd) if p):
        real = _real_dir(path)
        if real and _hidden(real) and not inside(real, home_real):  # AIR_HOME: hidden next
            ro(real)
    for real in _named_paths(argv):  # `python /tmp/x/train.py`: its folder, read-only
        if not inside(real, home_real):
            ro(real)
    for real in program_paths(argv[0]):  # an interpreter or checkout under /tmp (CI's)
        ro(real)
    out.append(("--tmpfs", "", home_real))  # AIR_HOME: nothing of it but the job's own folder
    for real in data:  # checked against the roots at start (tracking/data.recheck_at_start)
        if not inside(real, home_real):
            ro(real)
    for path in readonly:  # may lie in AIR_HOME: a trial's folder, for its evaluator
        real = os.path.realpath(path)
        if os.path.exists(real):
            ro(real)
    for path in writable:
        real = _real_dir(path)
        if real and not inside(real, home_real) and not inside(home_real, real):
            out.append(("--bind", real, real))
    jreal = os.path.realpath(jdir)
    out.append(("--bind", jreal, jreal))
    for path in kept:  # files in its folder that the job may read, never replace
        real = os.path.realpath(path)
        if os.path.isfile(real) and inside(real, jreal):
            ro(real)
    return View(base, tuple(out), cwd)


def resolved(argv: list[str], path: str | None, cwd: str | None) -> list[str]:
    """``argv`` with its program found as Popen would find it, so that a missing or
    non-executable program is the same FileNotFoundError or PermissionError (127 or 126)
    sandboxed or not: bwrap itself would only exit 1."""
    program = argv[0]
    if "/" in program:
        full = os.path.join(cwd or os.getcwd(), program)
        if not os.path.exists(full):
            raise FileNotFoundError(2, "No such file or directory", program)
        if os.path.isdir(full) or not os.access(full, os.X_OK):
            raise PermissionError(13, "Permission denied", program)
        return argv
    if shutil.which(program, path=path if path is not None else os.defpath) is None:
        raise FileNotFoundError(2, "No such file or directory", program)
    return argv


def signal_status(rc: int) -> int:
    """bwrap reports a command killed by signal N as exit 128+N: back to Popen's ``-N``."""
    return -(rc - 128) if 128 < rc <= 128 + 64 else rc


def doctor_check() -> dict[str, str]:
    """`air doctor`'s line: whether jobs run sandboxed here, and what to do if not."""
    name = "sandbox"
    mode = settings.get("AIR_SANDBOX")
    if mode == "off":
        detail = "off (AIR_SANDBOX=off): jobs run as the user, with the user's whole filesystem"
        return {"name": name, "status": "warn", "detail": detail, "next": "unset AIR_SANDBOX"}
    why = unavailable()
    if why is None:
        ahead = settings.get("AIR_SANDBOX_AHEAD")
        detail = (
            f"{bwrap_path()} works: local jobs run sandboxed (AIR_SANDBOX={mode}); idle"
            f" supervisors make the next one ahead (AIR_SANDBOX_AHEAD={ahead})"
        )
        return {"name": name, "status": "ok", "detail": detail, "next": ""}
    detail = f"none: {why}; " + (
        "a job asking for one (sandbox: on) is refused"
        if mode == "on"
        else "jobs run unsandboxed, each saying so"
    )
    return {
        "name": name,
        "status": "fail" if mode == "on" else "warn",
        "detail": detail,
        "next": "install bubblewrap (apt-get install bubblewrap), or set AIR_BWRAP to it",
    }


def failure_note(log_path: str | None) -> str:
    """For a sandboxed job that failed: a note when its log shows a write the sandbox refused
    (what to do instead), else ""."""
    if not log_path:
        return ""
    try:
        with os.fdopen(open_job_file(log_path), "rb") as f:  # a FIFO there is not waited on
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read()
    except OSError:
        return ""
    # A write outside its folder, or a path under the host's /tmp (its own /tmp is private).
    if b"Read-only file system" not in tail and b"No such file or directory: '/tmp/" not in tail:
        return ""
    return (
        " (it ran sandboxed, where only its own folder is writable and /tmp is its own: write"
        " under $AIR_CHECKPOINT_DIR, or name the folder in `writable`)"
    )
