"""The job's view as bwrap makes it (the package docstring): its base, mounts and argv."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.runtime.execution import sandbox_caches
from air_skills.runtime.execution.sandbox.paths import (
    _named_paths,
    _out_of_sight,
    _real_dir,
    inside,
    program_paths,
)
from air_skills.runtime.execution.sandbox.uid import (
    USER_CAPS,
    _passable_parents,
    _unsearchable,
    become,
    hand_over,
    job_user,
)


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
