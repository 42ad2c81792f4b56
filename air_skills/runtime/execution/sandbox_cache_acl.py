"""Where air runs as root: the user's cache folders shared with the job's uid by POSIX ACLs.

A root-run job is another host uid (sandbox.job_user), which cannot write root's 0755 cache
folders. A job that runs the user's own code shares them read-write all the same: each
folder gets an ACL entry for that uid (rwx) and a default entry its new files and folders
inherit, so what root puts there later stays writable by the jobs and what a job writes
stays root's to use. What was there before is granted once, by a walk that never follows a
link, changes only root's own entries, and widens no read: a folder or file that "other"
could not read keeps its ACL. Named secrets (``$HF_HOME/token``) are never granted, and no
default entry is put on a folder that may hold one later (XDG_CACHE_HOME, HF_HOME): a token
written there afterwards does not inherit the job's uid. Stdlib only (no setfacl here).
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Collection

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"
# The kernel's ACL xattr: version 2, then (tag u16, perm u16, id u32) per entry, sorted.
_VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
_WALK_MAX = 200_000  # entries granted by the first walk of one folder (a huge pip cache)

Acl = dict[tuple[int, int], int]


def _decode(raw: bytes) -> Acl:
    if len(raw) < 4 or struct.unpack_from("<I", raw)[0] != _VERSION:
        raise OSError("unknown ACL format")
    return {
        (tag, ident): perm
        for tag, perm, ident in struct.iter_unpack("<HHI", raw[4 : 4 + (len(raw) - 4) // 8 * 8])
    }


def _encode(acl: Acl) -> bytes:
    body = b"".join(struct.pack("<HHI", t, acl[(t, i)], i) for t, i in sorted(acl))
    return struct.pack("<I", _VERSION) + body


def _from_mode(mode: int) -> Acl:
    return {
        (USER_OBJ, _NO_ID): (mode >> 6) & 7,
        (GROUP_OBJ, _NO_ID): (mode >> 3) & 7,
        (OTHER, _NO_ID): mode & 7,
    }


def _read(fd: int, name: str, mode: int | None) -> Acl | None:
    """The ACL ``name`` of ``fd``; the one its mode means (access) or None (default) if unset."""
    try:
        return _decode(os.getxattr(fd, name))
    except OSError as exc:
        if exc.errno != getattr(os, "ENODATA", 61):
            raise
    return _from_mode(mode) if mode is not None else None


def _with_user(acl: Acl, uid: int, perm: int) -> Acl:
    out = dict(acl)
    out[(USER, uid)] = perm
    if (MASK, _NO_ID) in acl:  # widened just enough for the new entry
        out[(MASK, _NO_ID)] = acl[(MASK, _NO_ID)] | perm
    else:  # a minimal ACL had none: the group class as it was, and the new entry
        group = [p for (t, _i), p in out.items() if t in (USER, GROUP_OBJ, GROUP)]
        out[(MASK, _NO_ID)] = _or(group)
    return out


def _or(perms: list[int]) -> int:
    out = 0
    for p in perms:
        out |= p
    return out


def granted(folder: str, uid: int, *, inherit: bool) -> bool:
    """Whether ``folder`` already lets ``uid`` write it (and, with ``inherit``, passes that
    on to what is made in it): then no walk is needed."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        mode = os.fstat(fd).st_mode
        acl = _read(fd, ACCESS, mode) or {}
        if acl.get((USER, uid), 0) != 7 or acl.get((MASK, _NO_ID), 0) & 7 != 7:
            return False
        return not inherit or (_read(fd, DEFAULT, None) or {}).get((USER, uid)) == 7
    finally:
        os.close(fd)


def named_users(folder: str) -> set[int]:
    """The uids ``folder``'s ACLs (access or default) name; empty where it has none, or is
    missing or a link (never followed)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return set()
    try:
        found: set[int] = set()
        for name in (ACCESS, DEFAULT):
            try:
                acl = _read(fd, name, None) or {}
            except OSError:  # no ACLs on this filesystem, or one we cannot read
                continue
            found.update(ident for tag, ident in acl if tag == USER)
        return found
    finally:
        os.close(fd)


def share(
    folder: str,
    uid: int,
    *,
    inherit: bool = True,
    skip: Collection[str] = (),
    secrets: Collection[str] = (),
) -> None:
    """Let ``uid`` write ``folder`` (a folder of root's) and, the first time, what it holds;
    ``inherit``: a default entry on ``folder`` itself (never on XDG_CACHE_HOME or HF_HOME).
    ``skip``: folders below it shared on their own (not walked); ``secrets``: names never
    granted, at any depth. Raises OSError where the filesystem has no ACLs (the caller falls
    back) or the folder is not root's (a user's folder is theirs)."""
    if granted(folder, uid, inherit=inherit):
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise PermissionError(f"{folder} is not root's: it is not shared")
        _grant(fd, st, uid, inherit)
        _walk(fd, folder, uid, frozenset(skip), frozenset(secrets), [_WALK_MAX])
    finally:
        os.close(fd)


def _grant(fd: int, st: os.stat_result, uid: int, inherit: bool) -> None:
    is_dir = stat.S_ISDIR(st.st_mode)
    perm = 7 if is_dir else 6
    acl = _read(fd, ACCESS, st.st_mode) or {}
    if acl.get((USER, uid)) != perm or acl.get((MASK, _NO_ID), 0) & perm != perm:
        os.setxattr(fd, ACCESS, _encode(_with_user(acl, uid, perm)))
    if is_dir and inherit:
        base = _read(fd, DEFAULT, None) or _from_mode(st.st_mode)
        if base.get((USER, uid)) != 7:
            os.setxattr(fd, DEFAULT, _encode(_with_user(base, uid, 7)))


def _walk(
    fd: int, path: str, uid: int, skip: frozenset[str], secrets: frozenset[str], left: list[int]
) -> None:
    """Grant what ``fd`` holds, each entry by its own descriptor, opened O_NOFOLLOW."""
    me = os.geteuid()
    for entry in os.scandir(fd):
        left[0] -= 1
        if left[0] < 0:
            return
        name, full = entry.name, f"{path}/{entry.name}"
        if name in secrets or full in skip:
            continue
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        # Ours only, and only what "other" could read already: no read is widened.
        if st.st_uid != me or not st.st_mode & stat.S_IROTH:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IXOTH:
            flags = os.O_RDONLY | os.O_DIRECTORY
        elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:  # a hard link: not only here
            flags = os.O_RDONLY | os.O_NONBLOCK
        else:
            continue
        try:
            sub = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            continue
        try:
            got = os.fstat(sub)
            if (got.st_ino, got.st_dev) != (st.st_ino, st.st_dev):
                continue  # replaced since it was looked at
            _grant(sub, got, uid, inherit=True)
            if stat.S_ISDIR(got.st_mode):
                _walk(sub, full, uid, skip, secrets, left)
        except OSError:
            continue
        finally:
            os.close(sub)
