"""A sandboxed job's edges: its program found as Popen would, its exit, doctor's lines, its note."""

from __future__ import annotations

import os
import shlex
import shutil

from air_skills import settings
from air_skills.home import open_job_file
from air_skills.runtime.execution import sandbox_caches
from air_skills.runtime.execution.sandbox.bwrap import bwrap_path, unavailable
from air_skills.runtime.execution.sandbox.uid import NOBODY, SANDBOX_USER, job_user


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


def uid_check() -> dict[str, str]:
    """`air doctor`'s line on the uid root's jobs run as: a warning where it is 65534 (or
    named nobody), a uid other processes may run as, with which root's caches are shared."""
    name = "sandbox uid"
    user = job_user()
    if user is None:
        detail = "air runs as a user: sandboxed jobs run as that user, sharing nothing of root's"
        return {"name": name, "status": "ok", "detail": detail, "next": ""}
    uid = user[0]
    who = _user_name(uid)
    if uid != NOBODY and who not in ("nobody", "nfsnobody"):
        detail = f"as root, sandboxed jobs run as uid {uid} ({who or 'no passwd entry'})"
        stale = sandbox_caches.shared_with(NOBODY, os.environ)
        if not stale:
            return {"name": name, "status": "ok", "detail": detail, "next": ""}
        listed = " ".join(shlex.quote(f) for f in stale)
        detail += (
            f", but root's cache folders {', '.join(stale)} still let uid {NOBODY} (nobody)"
            " write them, as jobs ran before: other processes may run as that uid, and what it"
            " wrote there (kernels, packages) root's own code may load"
        )
        nxt = (
            f"as root: setfacl -R -P -x u:{NOBODY},d:u:{NOBODY} {listed}; chown -R"
            f" -h --from={NOBODY} {uid}:{user[1]} {listed}; and clear the compiled-code caches"
            " (Triton, inductor, pip) in them, which air makes again"
        )
        return {"name": name, "status": "warn", "detail": detail, "next": nxt}
    why = (
        "AIR_SANDBOX_UID names it"
        if settings.raw("AIR_SANDBOX_UID")
        else f"AIR_SANDBOX_UID is unset and there is no user {SANDBOX_USER}"
    )
    detail = (
        f"as root, sandboxed jobs run as uid {uid} ({who or 'nobody'}: {why}), with which"
        " root's cache folders (HF_HOME, TORCH_HOME, Triton, inductor, pip) are shared"
        " read-write; other processes may run as that uid (NFS root squash, some daemons) and"
        " could then write the kernels and packages root's own code loads from them"
    )
    nxt = (
        f"as root, `make install` (it makes the system user {SANDBOX_USER}, which jobs then"
        " run as), or set AIR_SANDBOX_UID to a uid no other process runs as"
    )
    return {"name": name, "status": "warn", "detail": detail, "next": nxt}


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


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
