"""The host uid a root-run job becomes: dropping root, handing folders over, hiding the rest."""

from __future__ import annotations

import functools
import os
import shutil
import stat
from collections.abc import Collection, Iterable, Mapping

from air_skills import settings
from air_skills.runtime.execution.sandbox.bwrap import SandboxUnavailable
from air_skills.runtime.execution.sandbox.paths import _hidden, _passable, inside

# The capabilities a root-run sandbox keeps until it becomes the job's uid (setpriv, or the
# stub made ahead), which drops them with the bounding set: the job holds none. DAC_OVERRIDE:
# its folder (its cwd) is the job uid's now, maybe 0700, and bwrap (or the stub) goes there
# as root first.
USER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_OVERRIDE")


# The uid of air's own that `make install` makes as root (useradd --system --user-group): a
# root-run job runs as it, and root's caches are shared with it. NOBODY: the fallback where
# it is missing, a uid other daemons may run as (NFS squash), which `air doctor` warns about.
SANDBOX_USER = "air-sandbox"
NOBODY = 65534


def job_user(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """The host (uid, gid) a sandboxed job runs as: AIR_SANDBOX_UID where air runs as root
    (a user namespace alone maps the job to host uid 0, owner of root's 0600 files and the
    disk nodes), unset: the ``air-sandbox`` user's uid, else 65534; its group: the uid's own.
    None where air runs as a user (the job runs as that user)."""
    if os.geteuid() != 0:
        return None
    uid = settings.get("AIR_SANDBOX_UID", os.environ if environ is None else environ)
    if uid is None:
        uid = default_uid()
    return uid, _primary_gid(uid)


def default_uid() -> int:
    """AIR_SANDBOX_UID's default: the uid of the ``air-sandbox`` user where it exists (and is
    a uid AIR_SANDBOX_UID could name: never root), else 65534. Looked up each time: a user
    made while supervisors run is used by their next job."""
    import pwd

    try:
        uid = pwd.getpwnam(SANDBOX_USER).pw_uid
    except KeyError:
        return NOBODY
    valid = settings.SETTINGS["AIR_SANDBOX_UID"].valid
    return uid if valid is None or valid(uid) else NOBODY


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
