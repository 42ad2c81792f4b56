"""A job's sandbox: its command wrapped in bubblewrap (``bwrap``), so it can change only its folder.

What a sandboxed job sees: the whole filesystem read-only; its own job folder (checkpoints,
outputs, logs, its private code view) writable; a private ``/tmp`` and ``/dev/shm``; a fresh
minimal ``/dev`` (its own GPUs' nodes only: sandbox_devices.py); the folders its spec names in
``writable``; its data inputs read-only at the real paths checked at start; the ML caches
(sandbox_caches.py). ``AIR_HOME`` is hidden beyond the job's folder (no ``air.db``, code store,
other jobs, studies, MLflow store). A network namespace of its own: the host's loopback
services are out of reach; outbound through slirp4netns unless ``network: false``
(sandbox_net.py). Where air runs as root the job runs as AIR_SANDBOX_UID, an unprivileged host
uid (job_user). A gang runs whole (torchrun and every rank) in one sandbox. Stdlib only: the
supervisor builds on it.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.home import open_job_file
from air_skills.runtime.execution import sandbox_caches, sandbox_probe

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
    places.append(str(Path(__file__).resolve().parents[3]))  # the folder holding air_skills/
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


# The capabilities a root-run sandbox keeps until it becomes the job's uid (setpriv, or the
# stub made ahead), which drops them with the bounding set: the job holds none. DAC_OVERRIDE:
# its folder (its cwd) is the job uid's now, maybe 0700, and bwrap (or the stub) goes there
# as root first.
USER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_OVERRIDE")


def job_user(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """The host (uid, gid) a sandboxed job runs as: AIR_SANDBOX_UID where air runs as root
    (a user namespace alone maps the job to host uid 0, owner of root's 0600 files and the
    disk nodes); None where air runs as a user (the job runs as that user)."""
    if os.geteuid() != 0:
        return None
    uid = settings.get("AIR_SANDBOX_UID", os.environ if environ is None else environ)
    return uid, _primary_gid(uid)


@functools.lru_cache(maxsize=4)
def _primary_gid(uid: int) -> int:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:  # a uid with no passwd entry: its own number as its group
        return uid


@functools.lru_cache(maxsize=4)
def _setpriv() -> str:
    found = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if found is None:
        raise SandboxUnavailable("setpriv (util-linux) not found: a root-run job cannot drop root")
    return found


def become(user: tuple[int, int], command: list[str]) -> list[str]:
    """``command`` run as ``user`` with no capability left, bounding set included (the
    bwrap way; the stub made ahead does the same itself)."""
    uid, gid = user
    return [
        _setpriv(), f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--bounding-set=-all", "--inh-caps=-all", "--", *command,
    ]  # fmt: skip


@dataclass(frozen=True)
class View:
    """A job's sandbox as bwrap makes it: ``base``, bwrap with the options every job of its
    kind shares (namespaces, capabilities, /, /dev, /proc, /tmp); then ``mounts``, in order,
    the later over the earlier, each ``(option, source, destination)`` (source "" for a
    tmpfs); then the folder it starts in, the variables it sets (``env``: the caches'),
    the host user the job becomes (None: it stays the caller's) and whether it reaches the
    network (through slirp4netns, sandbox_net.py). sandbox_ahead.py makes the base before
    the job is known and the rest when it is."""

    base: tuple[str, ...]
    mounts: tuple[tuple[str, str, str], ...]
    chdir: str | None
    env: tuple[tuple[str, str], ...] = ()
    user: tuple[int, int] | None = None
    network: bool = True
    notes: tuple[str, ...] = ()  # for the job's log: a cache folder that fell back

    def argv(self, command: list[str]) -> list[str]:
        """The whole bwrap command line that runs ``command`` in this view."""
        out = [*self.base, *mount_args(self.mounts)]
        if self.chdir:
            out += ["--chdir", self.chdir]
        for name, value in self.env:
            out += ["--setenv", name, value]
        if self.user is not None:
            command = become(self.user, command)
        return [*out, "--", *command]


def mount_args(mounts: Iterable[tuple[str, str, str]]) -> list[str]:
    """bwrap's arguments for ``mounts`` (View.mounts), in their order."""
    out: list[str] = []
    for option, src, dst in mounts:
        if option == "--dir":  # a folder on a tmpfs, made passable (bwrap's would be 0700)
            out += ["--perms", src or "0755", "--dir", dst]  # or as its source says (0777)
        else:
            out += [option, dst] if option == "--tmpfs" else [option, src, dst]
    return out


def base_args(
    bwrap: str,
    *,
    dev: Iterable[str] = ("--dev", "/dev"),
    die_with_parent: bool = False,
    user: tuple[int, int] | None = None,
    tmp_size: int | None = None,
    host_network: bool = False,
) -> tuple[tuple[str, ...], list[tuple[str, str, str]]]:
    """bwrap and its options for every job of this kind, and the device nodes ``dev`` (bwrap's
    arguments for /dev: sandbox_devices.py) binds on top, as mounts."""
    dev = list(dev)
    head, rest = dev[:2], dev[2:]  # a fresh /dev, then the GPU nodes bound into it
    nodes = [(rest[i], rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]
    # /dev/shm and /tmp private and writable by anyone in (the job's uid may not be root).
    out = [bwrap, "--ro-bind", "/", "/", *head, "--perms", "1777", "--tmpfs", "/dev/shm"]
    if die_with_parent:
        out.append("--die-with-parent")
    # Run as root, bwrap would leave the job every capability: it could unmount the tmpfs
    # hiding AIR_HOME, or remount / writable. No capability, whoever runs it (those to become
    # the job's uid go with root: become()). Its own network namespace: the host's loopback
    # services (the page, air-mcp, MLflow, a Ray head) are not there (sandbox_net.py).
    out += ["--cap-drop", "ALL"]
    for cap in USER_CAPS if user is not None else ():
        out += ["--cap-add", cap]
    out += ["--unshare-pid", *([] if host_network else ["--unshare-net"])]
    out += ["--proc", "/proc", "--perms", "1777"]
    if tmp_size:  # its /tmp (memory, not disk) holds at most its disk cap (tmp_bytes)
        out += ["--size", str(tmp_size)]
    out += ["--tmpfs", "/tmp"]
    return tuple(out), nodes


def tmp_bytes(disk_gb: float | None) -> int | None:
    """The size of a job's private /tmp for a disk cap of ``disk_gb`` (None: no cap, the
    tmpfs default of half the memory)."""
    return max(1 << 20, int(disk_gb * 1e9)) if disk_gb else None


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
    dev: Iterable[str] = ("--dev", "/dev"),
    hidden: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    trusted: bool = False,
    tmp_size: int | None = None,
) -> View:
    """The job's view (module docstring); mounts in order, the later over the earlier.
    ``dev``: how /dev is made (sandbox_devices.py: a GPU job's). ``environ``: the job's
    environment (its caches' folders; os.environ if None); ``trusted``: the job runs the
    user's own code, and shares the caches read-write (sandbox_caches.py). Where the job
    becomes another uid (job_user), its folder and ``writable`` folders are handed to it."""
    env = os.environ if environ is None else environ
    user = job_user(env)
    home_real = os.path.realpath(home)
    # AIR_SANDBOX_NETWORK=host grants the host's network, loopback services included.
    host_network = network and host_network_granted(env)
    base, out = base_args(
        bwrap,
        dev=dev,
        die_with_parent=die_with_parent,
        user=user,
        tmp_size=tmp_size,
        host_network=host_network,
    )
    jreal = os.path.realpath(jdir)
    caches = sandbox_caches.plan(env, home_real, trusted=trusted, user=user)

    def ro(real: str) -> None:
        out.append(("--ro-bind", real, real))

    # Its workdir (and a live job's cwd) may lie under /tmp, now private: seen read-only.
    for path in dict.fromkeys(p for p in (workdir, cwd) if p):
        real = _real_dir(path)
        if real and _out_of_sight(real, user) and not inside(real, home_real):
            ro(real)  # (AIR_HOME: hidden next)
    for real in _named_paths(argv, user):  # `python /tmp/x/train.py`: its folder, read-only
        if not inside(real, home_real):
            ro(real)
    for real in program_paths(argv[0], user):  # an interpreter or checkout under /tmp (CI's)
        ro(real)  # or, for another uid, under root's home
    out.append(("--tmpfs", "", home_real))  # AIR_HOME: nothing of it but the job's own folder
    for real in data:  # checked against the roots at start (tracking/data.recheck_at_start)
        if not inside(real, home_real):
            ro(real)
    for path in readonly:  # may lie in AIR_HOME: a trial's folder, for its evaluator
        real = os.path.realpath(path)
        if os.path.exists(real):
            ro(real)
    for path in hidden:  # what the job must not read (a study's held-out data): masked
        real = os.path.realpath(path)
        if os.path.isdir(real):
            out.append(("--tmpfs", "", real))
        elif os.path.exists(real):
            out.append(("--ro-bind", "/dev/null", real))
    granted: list[str] = []
    for path in writable:
        real = _real_dir(path)
        if real and not inside(real, home_real) and not inside(home_real, real):
            out.append(("--bind", real, real))
            granted.append(real)
    out += caches.mounts
    out.append(("--bind", jreal, jreal))
    keep: list[str] = []
    for path in kept:  # files in its folder that the job may read, never replace
        real = os.path.realpath(path)
        if os.path.isfile(real) and inside(real, jreal):
            ro(real)
            keep.append(real)
    if user is not None:
        hand_over(jreal, user, keep)
        for real in granted:  # the folder itself: what it holds keeps its owner
            hand_over(real, user, (), depth=0)
        out[:0] = _unsearchable(user, [m[2] for m in out] + [cwd or ""])
        out = _passable_parents(out)
    out += caches.farm  # an untrusted job's private caches: folders and links in its /tmp
    served = network and not host_network  # by slirp4netns (sandbox_net.py)
    env = tuple(caches.env.items())
    return View(base, tuple(out), cwd, env, user, served, tuple(caches.notes))


def host_network_granted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether AIR_SANDBOX_NETWORK grants sandboxed jobs the host's network (``host``)
    rather than a namespace of their own (``own``, the default)."""
    env = os.environ if environ is None else environ
    return settings.get("AIR_SANDBOX_NETWORK", env) == "host"


def _passable_parents(mounts: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``mounts`` with a ``--dir`` (0755) before each, for the folders above its mount point
    that lie on a tmpfs of the sandbox: bwrap makes them 0700, which another uid cannot pass."""
    points = {"/tmp": True, "/dev": True}  # mount point -> whether a tmpfs
    made: set[str] = set()
    out: list[tuple[str, str, str]] = []
    for mount in mounts:
        dst = mount[2]
        below = [p for p in points if dst != p and inside(dst, p)]
        top = max(below, key=len) if below else None
        if top is not None and points[top]:  # a bind's folders are the host's own
            rest = dst[len(top) :].strip("/").split("/")[:-1]
            for i in range(1, len(rest) + 1):
                folder = top.rstrip("/") + "/" + "/".join(rest[:i])
                if folder not in made:
                    made.add(folder)
                    out.append(("--dir", "", folder))
        points[dst] = mount[0] == "--tmpfs"
        made.add(dst)
        out.append(mount)
    return out


def _unsearchable(user: tuple[int, int], places: Iterable[str]) -> list[tuple[str, str, str]]:
    """A tmpfs over each topmost folder above ``places`` that ``user`` cannot pass (root's
    0700 home, a 0700 AIR_HOME's parent): nothing there was readable by it, and the places
    bound below come back through folders it can pass (bwrap makes them 0755)."""
    out: list[str] = []
    for place in places:
        if not place.startswith("/") or _hidden(place):  # under the private /tmp: made anew
            continue
        parts = place.strip("/").split("/")
        for i in range(1, len(parts)):
            folder = "/" + "/".join(parts[:i])
            if any(inside(folder, o) for o in out):
                break
            if not _passable(folder, user):
                out.append(folder)
                break
    return [("--tmpfs", "", f) for f in out]


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


def hand_over(
    folder: str, user: tuple[int, int], keep: Collection[str] = (), depth: int = 32
) -> None:
    """Give ``folder`` and what air put in it to the job's uid, never through a link the
    job planted: each folder opened O_NOFOLLOW relative to its parent's descriptor, each
    file changed by its own descriptor and only when it has no other hard link (one to a
    file elsewhere would hand that file over). ``keep``: files (real paths) that stay air's.
    ``depth``: folders below it to walk (0: the folder itself only)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(folder, flags)
    except OSError:
        return
    try:
        _hand_over_at(fd, folder, user, frozenset(keep), depth)
    finally:
        os.close(fd)


def _hand_over_at(
    fd: int, path: str, user: tuple[int, int], keep: frozenset[str], depth: int
) -> None:
    uid, gid = user
    st = os.fstat(fd)
    if st.st_uid != uid:
        os.fchown(fd, uid, gid)
    if depth <= 0:
        return
    for entry in os.scandir(fd):
        name = entry.name
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(
                    name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError:
                continue
            try:
                _hand_over_at(sub, f"{path}/{name}", user, keep, depth - 1)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode) and st.st_uid != uid and f"{path}/{name}" not in keep:
            try:  # by its descriptor: what was checked is what changes
                f = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError:
                continue
            try:
                got = os.fstat(f)
                if stat.S_ISREG(got.st_mode) and got.st_nlink == 1:
                    os.fchown(f, uid, gid)
            finally:
                os.close(f)


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
        from air_skills.runtime.execution import sandbox_net

        ahead = settings.get("AIR_SANDBOX_AHEAD")
        detail = (
            f"{bwrap_path()} works: local jobs run sandboxed (AIR_SANDBOX={mode}); idle"
            f" supervisors make the next one ahead (AIR_SANDBOX_AHEAD={ahead})"
        )
        user = job_user()
        if user is not None:
            detail += f"; as root, jobs run as uid {user[0]} (AIR_SANDBOX_UID)"
        slirp = sandbox_net.slirp_path()
        if slirp is None:
            detail += "; slirp4netns is missing: sandboxed jobs have loopback only (no network)"
            nxt = "apt-get install slirp4netns (or set AIR_SLIRP4NETNS to it)"
            return {"name": name, "status": "warn", "detail": detail, "next": nxt}
        detail += f"; their network goes through {slirp} (the host's loopback out of reach)"
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
            tail = f.read(65536)  # a log grown (or truncated long) since: not past it
    except OSError:
        return ""
    user = job_user()
    if user is not None and b"Permission denied" in tail:
        return (
            f" (it ran sandboxed as uid {user[0]} (AIR_SANDBOX_UID), as air runs as root: what"
            " it reads must be readable by that uid, what it writes must be its own folder,"
            " `writable` or the caches)"
        )
    # A write outside its folder, or a path under the host's /tmp (its own /tmp is private).
    if b"Read-only file system" not in tail and b"No such file or directory: '/tmp/" not in tail:
        return ""
    return (
        " (it ran sandboxed, where only its own folder is writable and /tmp is its own: write"
        " under $AIR_CHECKPOINT_DIR, download into the caches its variables name ($HF_HOME,"
        " $TORCH_HOME, $XDG_CACHE_HOME), or name the folder in `writable`)"
    )
