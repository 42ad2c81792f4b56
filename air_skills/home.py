"""Where AIR Skills keeps its state: AIR_HOME and the per-job folders under it."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import NotFound, StoreError
from air_skills.job_folder import write_fresh

JOB_ID_RE = re.compile(r"^job-[0-9a-f]{10}$")


def default_home() -> Path:
    home = settings.get("AIR_HOME")
    if home:
        return home
    from platformdirs import user_data_dir

    return Path(user_data_dir("air-skills", appauthor=False))


def ensure_home(home: Path) -> Path:
    """Create AIR_HOME if missing, owner-only; a clear StoreError when it cannot be used.

    Owner-only (0700, its database 0600) because it holds job environments and logs: another
    local user must not read them. A home made by an older version is tightened here.
    """
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        refuse_unsafe_home(home)
        (home / "jobs").mkdir(exist_ok=True, mode=0o700)
        owner_only(home, home / "jobs")
    except OSError as exc:
        raise StoreError(
            f"AIR_HOME {home} cannot be created: {exc.strerror or exc}",
            hint="set AIR_HOME to a writable folder",
            home=str(home),
        ) from None
    if not os.access(home, os.W_OK):
        raise StoreError(
            f"AIR_HOME {home} is read-only",
            hint="set AIR_HOME to a writable folder, or fix its permissions",
            home=str(home),
        )
    return home


# What in AIR_HOME decides what runs (the code store and its stat cache, the job folders, the
# state and tracking databases, the container engine's settings): each must be ours and
# writable by us alone, like the home.
TRUSTED_PARTS = (
    "jobs",
    "code",
    "code/blobs",
    "code/stat_cache.db",
    "air.db",
    "air.db-wal",
    "air.db-shm",
    "mlflow.db",
    "containers",  # the engine settings air passes podman (runtime/containers/engine_config.py)
)


# Homes checked by an enclosing ``home_checked`` (a batch's call): their checks are skipped.
_CHECKED: ContextVar[frozenset[str]] = ContextVar("air_homes_checked", default=frozenset())


@contextmanager
def home_checked(home: Path) -> Iterator[None]:
    """``home`` checked once (``refuse_unsafe_home``) for a batch's call: inside, its checks
    are skipped (1,000 jobs: one check of ~17 stats, not 1,000). This thread and call only."""
    refuse_unsafe_home(home)
    token = _CHECKED.set(_CHECKED.get() | {os.fspath(home)})
    try:
        yield
    finally:
        _CHECKED.reset(token)


def refuse_unsafe_home(home: Path) -> None:
    """Refuse a home another user could change, as OpenSSH refuses such a home or key file.

    The home, its trusted parts and every folder above it must belong to us (or root, above
    it) and not be writable by group or others (a sticky folder such as /tmp excepted above
    the home; a part: by others only): another user who can write there can swap the code a
    launch runs. Refused, never repaired: what they wrote may already be in it. A dozen stats;
    none inside ``home_checked(home)``, which checked it when the call began.
    """
    if os.fspath(home) in _CHECKED.get():
        return
    uid = os.geteuid()
    real = os.path.realpath(home)  # os.path, not pathlib: this runs on every launch
    try:
        st = os.stat(real)
    except FileNotFoundError:
        pass  # not made yet (the code store used on its own): the folders above still count
    else:
        if st.st_uid != uid or st.st_mode & 0o022:
            _unsafe(home, real, st, "AIR_HOME")
    # Inside a home that is ours and not writable by others, a part made under a umask of 002
    # (group-writable) is fine: the home is tightened to 0700 below, so no one else reaches it.
    for part in TRUSTED_PARTS:
        path = f"{real}/{part}"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if st.st_uid != uid or st.st_mode & 0o002:
            _unsafe(home, path, st, "AIR_HOME")
    parent = real
    while parent != "/":
        parent = os.path.dirname(parent)
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue
        sticky = st.st_mode & stat.S_ISVTX and stat.S_ISDIR(st.st_mode)
        if st.st_uid not in (uid, 0) or (st.st_mode & 0o022 and not sticky):
            _unsafe(home, parent, st, "a folder above AIR_HOME")


def _unsafe(home: Path, path: str, st: os.stat_result, where: str) -> None:
    uid = os.geteuid()
    mode = stat.filemode(st.st_mode)
    if st.st_uid != uid and not (where != "AIR_HOME" and st.st_uid == 0):
        what = f"belongs to uid {st.st_uid}, not to you (uid {uid})"
        fix = f"`chown -R {uid} {path}` if its content is yours"
    else:
        what = f"is writable by other users ({mode})"
        fix = f"`chmod go-w {path}` if nobody else changed it"
    raise StoreError(
        f"{where} is unsafe: {path} {what}; another user could change the code and state that"
        " `air` runs, so it is not used",
        code="unsafe-home",
        hint=f"{fix}, or set AIR_HOME to a folder of your own (mode 0700)",
        home=str(home),
        path=str(path),
    )


def owner_only(*paths: Path) -> None:
    """Take group and other access off ``paths`` that this user owns (others' are left be)."""
    uid = os.getuid()
    for path in paths:
        try:
            st = path.stat()
            if st.st_uid == uid and st.st_mode & 0o077:
                path.chmod(st.st_mode & 0o700)
        except FileNotFoundError:
            pass


def check_job_id(job_id: str) -> str:
    """Refuse anything that is not a job id (path tricks included) before it reaches a path."""
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        shown = job_id if isinstance(job_id, str) and len(job_id) <= 80 else "(invalid)"
        raise NotFound(
            f"no job {shown!r}: job ids look like job-0123456789",
            hint="list jobs with `air ls` (MCP: list_jobs)",
            job_id=shown,
        )
    return job_id


def job_dir(home: Path, job_id: str) -> Path:
    return home / "jobs" / check_job_id(job_id)


# --- reading a job folder's files: a job (or anyone who can write the folder) may have swapped
# one for a FIFO, a device or a link; opened non-blocking, without following a link, regular
# files only, so no reader (supervisor, reconcile, `air ls`, `air logs`) ever waits on one.

MAX_JOB_FILE_BYTES = 16 << 20  # a record, plan, env or config file; logs are streamed
_NO_WAIT = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_JOB_FILE = os.O_RDONLY | _NO_WAIT


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
}


class NotRegularFile(OSError):
    """A job-folder path that is a FIFO, device, socket or folder, or is too big to read."""

    def __str__(self) -> str:
        return str(self.strerror)  # the path and what it is, without "[Errno 22]"


def open_job_file(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path``, a regular file; never blocks. FileNotFoundError when
    missing, OSError (ELOOP) for a symlink, NotRegularFile for anything but a regular file."""
    return _regular(os.open(path, _OPEN_JOB_FILE), path)


def append_job_file(path: str | os.PathLike[str]) -> int:
    """A descriptor appending to ``path`` (made 0644 when missing), a regular file; never blocks
    (a FIFO in its place, with no reader, would block a plain open for writing forever)."""
    return _regular(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NO_WAIT, 0o644), path)


def _regular(fd: int, path: str | os.PathLike[str]) -> int:
    """``fd`` made blocking again if it is a regular file; else closed and NotRegularFile."""
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "something else")
            text = f"{os.fspath(path)} is not a regular file (it is {kind})"
            raise NotRegularFile(errno.EINVAL, text, os.fspath(path))
        os.set_blocking(fd, True)  # a regular file: reads and writes do not wait anyway
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_job_file(path: str | os.PathLike[str], max_bytes: int = MAX_JOB_FILE_BYTES) -> bytes:
    """The bytes of a small job-folder file (see open_job_file); NotRegularFile over max_bytes."""
    with os.fdopen(open_job_file(path), "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise NotRegularFile(errno.EFBIG, f"{os.fspath(path)} is over {max_bytes} bytes")
    return data


def read_job_json(path: str | os.PathLike[str], max_bytes: int = MAX_JOB_FILE_BYTES) -> Any:
    """A small job-folder file's JSON value; OSError or ValueError when it cannot be had."""
    return json.loads(read_job_file(path, max_bytes))


LAUNCH_ENV = "env.json"  # in the job's folder: the environment it was launched from
# A file air writes in a job's folder: never through a link left at its name (job_folder.py).
_WRITE_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def write_launch_env(jdir: Path, environ: Mapping[str, str]) -> None:
    """Save what the job keeps of its launcher's environment (job_env.launch_environment: no
    secret of the launcher's; owner-only all the same). Written as the launch's build
    folder's files are (``write_fresh``: new, in one go; json.dumps, not json.dump's
    pure-Python encoder)."""
    write_fresh(jdir, LAUNCH_ENV, json.dumps(dict(environ)), 0o600)


FOLDER_RECORD = "record.json"  # in the job's folder: what rebuilds its record if air.db is lost


def write_folder_record(jdir: Path, record: dict[str, object]) -> None:
    """Keep the job's record (spec without env values) in its folder; skipped without one."""
    try:  # made new in the build folder (a FIFO or link in its place: replaced, as write_in)
        write_fresh(jdir, FOLDER_RECORD, json.dumps(record, separators=(",", ":")))
    except OSError:
        pass  # no folder (a record made without one): nothing to rebuild it from


JOB_ENV = "job_env.json"  # in the job's folder: the values of the spec's ``env``


def write_job_env(jdir: Path, env: dict[str, str]) -> None:
    """Save the values of a job's own ``env`` (owner-only: API keys): the store keeps names."""
    fd = os.open(jdir / JOB_ENV, _WRITE_NEW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(env, f)


def read_job_env(jdir: Path) -> dict[str, str] | None:
    """The values of the job's own ``env``; None when the store's spec still holds them."""
    try:
        env = read_job_json(jdir / JOB_ENV)
    except (OSError, ValueError):
        return None
    return env if isinstance(env, dict) else None


def read_launch_env(jdir: Path) -> dict[str, str] | None:
    """The environment the job was launched from; None for a job launched without one."""
    try:
        env = read_job_json(jdir / LAUNCH_ENV)
    except (OSError, ValueError):
        return None
    return env if isinstance(env, dict) else None
