"""Inside a sandbox made ahead (sandbox_ahead.py): wait for a job, make its mounts, drop every
capability, become the job.

bwrap made the namespaces and the base view (/, /dev, /proc, a private /tmp) before any job
was known, and left this process CAP_SYS_ADMIN and CAP_SETPCAP only, plus the host's whole
tree at the folder its second argument names. When its supervisor sends a job (its log as a
file descriptor, then its mounts, folder, argv and environment), this process makes the
job's mounts exactly as bwrap would from the same arguments (sandbox.View), detaches the
host's tree, becomes the job's uid where it is given one (sandbox.job_user: bwrap then left it
CAP_SETUID and CAP_SETGID too), drops every capability (asked of the kernel again: it never
runs a job that holds one) and execs the job.

It tells the supervisor ``R`` once it is ready (and takes the process name its third
argument gives), ``X`` just before the exec, ``E`` and why when it gives up (the supervisor
then starts the job the usual way); an EOF (the supervisor gone) ends it. Run as a script
(``python -S -I``): stdlib only, nothing of air_skills, and the C modules where their
Python wrappers would double its start (a sandbox per idle supervisor, made while it waits).
"""

from __future__ import annotations

import _signal
import _socket
import ctypes
import marshal
import os
import struct
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_SILENT, MS_RELATIME = 16384, 32768, 1 << 21
MNT_DETACH = 2
PR_CAPBSET_DROP, PR_GET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 39, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# statvfs flags -> the mount flags a remount must keep (a user namespace refuses to clear
# a flag the mount was locked with)
_KEPT = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


class Refused(Exception):
    """A step of the job's start failed: the supervisor starts it the usual way."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        errno = ctypes.get_errno()
        raise Refused(f"{what}: {os.strerror(errno)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = [None if v is None else v.encode() for v in (src, dst, fstype, data)]
    _check(libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {src} on {dst}")


def _kept_flags(path: str) -> int:
    got = os.statvfs(path).f_flag
    return sum(ms for st, ms in _KEPT if got & st)


def _host_mounts(host_view: str) -> list[str]:
    """The mount points under ``host_view`` (as host paths): a bind of a folder that holds one
    brings it along, and a read-only bind makes it read-only too."""
    out = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            point = line.split(b" ")[4].decode("unicode_escape")  # octal escapes: \040
            if point.startswith(host_view + "/"):
                out.append(point[len(host_view) :])
    return out


def _ensure(dst: str, is_dir: bool) -> None:
    """The mount point, made as bwrap makes it: folders 0755, a file empty."""
    if os.path.lexists(dst):
        return
    os.makedirs(dst if is_dir else os.path.dirname(dst), mode=0o755, exist_ok=True)
    if not is_dir:
        os.close(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))


def _bind(option: str, src: str, dst: str, host_view: str, host_mounts: list[str]) -> None:
    """bwrap's --bind / --ro-bind / --dev-bind: recursive, then every mount of it remounted
    nosuid (and nodev, and read-only, as the option says)."""
    host = host_view + src
    _ensure(dst, os.path.isdir(host))
    _mount(host, dst, None, MS_SILENT | MS_BIND | MS_REC, None)
    extra = MS_NOSUID | (0 if option == "--dev-bind" else MS_NODEV)
    extra |= MS_RDONLY if option == "--ro-bind" else 0
    below = [dst + m[len(src) :] for m in host_mounts if m.startswith(src.rstrip("/") + "/")]
    for point in [dst, *below]:
        flags = MS_SILENT | MS_BIND | MS_REMOUNT | _kept_flags(point) | extra
        _mount("none", point, None, flags, None)


def _make_view(mounts: list[list[str]], host_view: str, host_mounts: list[str]) -> None:
    for option, src, dst in mounts:
        if option == "--dir":  # bwrap's --perms 0755 --dir: passable by the job's uid
            mode = int(src, 8) if src else 0o755  # or its source's (0777: its private caches)
            os.makedirs(dst, mode=mode, exist_ok=True)
            os.chmod(dst, mode)
        elif option == "--symlink":  # bwrap's --symlink TARGET DEST
            os.symlink(src, dst)
        elif option == "--tmpfs":
            _ensure(dst, True)
            _mount("tmpfs", dst, "tmpfs", MS_SILENT | MS_NOSUID | MS_NODEV, "mode=0755")
        elif option in ("--bind", "--ro-bind", "--dev-bind"):
            _bind(option, src, dst, host_view, host_mounts)
        else:
            raise Refused(f"unknown mount {option}")
    _check(libc.umount2(host_view.encode(), MNT_DETACH), "detach the host's tree")
    os.rmdir(host_view)


def _drop_bounding_set() -> None:
    """No capability can be gained again, by anything this process becomes (done ahead:
    the effective ones stay until _drop_capabilities)."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    for cap in range(last_cap + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")


def _drop_capabilities() -> None:
    """None left: ambient, effective, permitted, inheritable (the bounding set is empty
    already); then asked of the kernel again (capget, no_new_privs)."""
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient")
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    _check(libc.capset(ctypes.byref(header), (_CapData * 2)()), "capset")
    held = (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), held), "capget")
    left = [getattr(d, f) for d in held for f in ("effective", "permitted", "inheritable")]
    if any(left) or libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        raise Refused(f"capabilities left ({left}) or no_new_privs unset")


def _receive(sock: _socket.socket) -> tuple[int, dict]:
    msg, fds, _flags, _addr = sock.recvmsg(8, _socket.CMSG_SPACE(4), _socket.MSG_CMSG_CLOEXEC)
    log_fd = -1
    for level, kind, data in fds:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            log_fd = struct.unpack("i", data[:4])[0]
    if len(msg) < 8:
        raise EOFError
    size = struct.unpack("!Q", msg)[0]
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(1 << 20, size - got))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    if log_fd < 0:
        raise Refused("no log descriptor")
    return log_fd, marshal.loads(b"".join(chunks))


def main() -> None:
    fd, host_view, ready_name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.set_inheritable(fd, False)  # bwrap passed it open: the job must not hold it
    sock = _socket.socket(fileno=fd)
    try:
        _drop_bounding_set()
        host_mounts = _host_mounts(host_view)
    except (Refused, OSError) as exc:
        sock.sendall(b"E" + str(exc).encode(errors="replace"))
        os._exit(1)
    sock.sendall(b"R")
    with open("/proc/self/comm", "w") as f:  # what `ps` (and a test) sees of a ready one
        f.write(ready_name)
    try:
        log_fd, job = _receive(sock)
    except (EOFError, OSError):
        os._exit(0)  # the supervisor went, or took another path: nothing started
    try:
        _make_view(job["mounts"], host_view, host_mounts)
        if job.get("chdir"):
            os.chdir(job["chdir"])
        # What Popen(restore_signals=True) gives: Python ignores these, an exec keeps that.
        for signum in (_signal.SIGPIPE, _signal.SIGXFSZ):
            _signal.signal(signum, _signal.SIG_DFL)
        if job.get("user"):  # as setpriv does for bwrap: no group left, then the uid
            uid, gid = job["user"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if os.getresuid() != (uid, uid, uid) or os.getgroups() not in ([], [gid]):
                raise Refused(f"still {os.getresuid()} {os.getgroups()} after becoming {uid}")
        _drop_capabilities()
    except (Refused, OSError) as exc:
        sock.sendall(b"E" + str(exc).encode(errors="replace"))
        os._exit(1)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sock.sendall(b"X")
    argv = job["argv"]
    try:
        os.execvpe(argv[0], argv, job["env"])
    except OSError as exc:  # as bwrap says it, into the job's log
        os.write(2, f"bwrap: execvp {argv[0]}: {exc.strerror}\n".encode())
        os._exit(1)


if __name__ == "__main__":
    main()
