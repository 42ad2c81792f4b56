"""A job's folder, worked on through descriptors: any name in it may be a link the job planted.

The folder is opened once (``O_DIRECTORY | O_NOFOLLOW``) and every file and sub-folder is
reached relative to that descriptor, one name at a time, no link followed at any step: a
sub-folder with ``openat(O_DIRECTORY | O_NOFOLLOW)``, a removal with ``unlinkat``, a folder
made with ``mkdirat``, a link with ``symlinkat``. A write goes to a fresh temp name
(``O_CREAT | O_EXCL | O_NOFOLLOW``) renamed over the name (``renameat``): a link the job left
in its place is replaced, never written through. A name with ``/`` or a ``..`` is refused, so
nothing walks out of the folder by a path either. Stdlib only: the supervisor, the stall watch,
the relay, GC and export all use it (runtime code that acts outside the sandbox).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from typing import BinaryIO

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _name(name: str) -> str:
    """``name`` when it is one plain entry of a folder; else ValueError (never a path)."""
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"not a plain name in a job's folder: {name!r}")
    return name


class JobFolder:
    """An open folder of a job (``JobFolder.open(path)``); every method works by name in it.

    Refusals are OSError: ``ELOOP``/``ENOTDIR`` where a link or a file stands in a folder's
    place, ``EINVAL`` where something not a regular file stands in a file's place.
    """

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path  # for messages only: never opened by path again

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> JobFolder:
        """The folder at ``path`` (its last name not followed if a link); FileNotFoundError
        when missing, OSError (ELOOP/ENOTDIR) when a link or a file stands there."""
        return cls(os.open(path, _DIR), os.fspath(path))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> JobFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- folders ------------------------------------------------------------------------------

    def sub(self, *names: str, create: bool = False, mode: int = 0o755) -> JobFolder:
        """The sub-folder ``names[0]/names[1]/...``, each opened by name without following a
        link (made when ``create`` and missing); close it (or use ``with``)."""
        fd = os.dup(self.fd)
        path = self.path
        try:
            for name in names:
                _name(name)
                try:
                    new = os.open(name, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                        os.mkdir(name, mode, dir_fd=fd)
                    new = os.open(name, _DIR, dir_fd=fd)
                os.close(fd)
                fd = new
                path = os.path.join(path, name)
        except BaseException:
            os.close(fd)
            raise
        return JobFolder(fd, path)

    def mkdir(self, name: str, mode: int = 0o755) -> None:
        """Make the folder ``name`` unless a folder (not a link) is there already."""
        try:
            os.mkdir(_name(name), mode, dir_fd=self.fd)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode):
                raise
        return None

    def lstat(self, name: str) -> os.stat_result | None:
        """What stands at ``name`` (a link is a link); None when nothing does."""
        try:
            return os.stat(_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def is_dir(self, name: str) -> bool:
        """Whether ``name`` is a real folder (not a link to one)."""
        st = self.lstat(name)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def names(self) -> list[str]:
        """The names in the folder."""
        return os.listdir(self.fd)

    # --- files ----------------------------------------------------------------------------------

    def write(self, name: str, data: bytes | str | BinaryIO, mode: int = 0o644) -> None:
        """``name`` holds ``data`` (whole, or as it was): a fresh temp file renamed over it.
        ``data`` may be a file open for reading: copied in chunks."""
        _name(name)
        for _ in range(8):  # a temp name the job guessed and took: another one
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, _NEW, mode, dir_fd=self.fd)
            except FileExistsError:
                continue
            break
        else:
            raise FileExistsError(errno.EEXIST, f"no free temp name for {name}", self.path)
        try:
            try:
                chunks = _chunks(data)
                for raw in chunks:
                    view = memoryview(raw)
                    while view:
                        view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    def open_read(self, name: str) -> int:
        """A read-only descriptor of the regular file ``name`` (never a link, never waits)."""
        return _regular(os.open(_name(name), _READ, dir_fd=self.fd), self.path, name)

    def read(self, name: str, max_bytes: int = 1 << 20) -> bytes:
        """At most ``max_bytes`` of the regular file ``name`` (OSError when none is there)."""
        fd = self.open_read(name)
        try:
            return os.read(fd, max_bytes)
        finally:
            os.close(fd)

    def open_append(self, name: str, mode: int = 0o644) -> int:
        """A descriptor appending to the regular file ``name`` (made when missing)."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(_name(name), flags | os.O_CLOEXEC, mode, dir_fd=self.fd)
        return _regular(fd, self.path, name)

    def touch(self, name: str, mode: int = 0o644) -> None:
        """``name`` exists as a regular file (made empty when missing; never through a link)."""
        os.close(self.open_append(name, mode))

    def unlink(self, name: str) -> bool:
        """Remove the file or link ``name`` (a link's target is untouched); False if missing."""
        try:
            os.unlink(_name(name), dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def remove(self, name: str) -> None:
        """Remove whatever stands at ``name``: a file or link, or a folder with all it holds
        (walked by descriptors: a link inside is removed, never followed)."""
        st = self.lstat(name)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, ignore_errors=True, dir_fd=self.fd)
        else:
            self.unlink(name)

    def readlink(self, name: str) -> str | None:
        """The target of the link ``name``; None when it is not a link (or missing)."""
        try:
            return os.readlink(_name(name), dir_fd=self.fd)
        except (FileNotFoundError, OSError):
            return None

    def symlink(self, target: str, name: str) -> None:
        """``name`` becomes a link to ``target``, whatever stood there before (removed, its
        own target untouched)."""
        self.remove(name)
        os.symlink(target, _name(name), dir_fd=self.fd)

    def walk_files(self, prefix: str = "") -> Iterator[tuple[str, int, str, os.stat_result]]:
        """(relative path, its folder's fd, name, stat) of each regular file below, walked by
        descriptors with no link followed (the fds are open only while iterating)."""
        yield from _regular_files(self.fd, prefix)


def _chunks(data: bytes | str | BinaryIO) -> Iterator[bytes]:
    if isinstance(data, str):
        yield data.encode()
    elif isinstance(data, (bytes, bytearray, memoryview)):
        yield bytes(data)
    else:
        while chunk := data.read(1 << 20):
            yield chunk


def _regular(fd: int, folder: str, name: str) -> int:
    """``fd`` made blocking again if a regular file; else closed and OSError (EINVAL)."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{name} in {folder} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _regular_files(dir_fd: int, prefix: str) -> Iterator[tuple[str, int, str, os.stat_result]]:
    with os.scandir(dir_fd) as entries:
        found = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
    for name, st in sorted(found):
        rel = f"{prefix}{name}"
        if stat.S_ISREG(st.st_mode):
            yield rel, dir_fd, name, st
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, _DIR, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from _regular_files(sub, rel + "/")
            finally:
                os.close(sub)


def open_at(path: str | os.PathLike[str], *names: str) -> JobFolder:
    """The folder ``path`` then ``names`` below it, none followed if a link (see ``sub``)."""
    with JobFolder.open(path) as top:
        return top.sub(*names) if names else JobFolder(os.dup(top.fd), top.path)


def write_in(
    folder: str | os.PathLike[str], name: str, data: bytes | str, mode: int = 0o644
) -> None:
    """``folder/name`` holds ``data``: ``folder`` opened without following a link, the file
    written through a fresh temp file (JobFolder.write)."""
    with JobFolder.open(folder) as f:
        f.write(name, data, mode)


def write_fresh(
    folder: str | os.PathLike[str], name: str, data: bytes | str, mode: int = 0o644
) -> None:
    """``folder/name`` holds ``data``, for a launch's build folder (``jobs/.tmp-<id>``: only
    this launch has written in it, and a crash before its COMMIT discards it whole): the file
    made new (``O_EXCL``, no link followed) and written in one go, 3 calls, no temp name to
    rename. When anything stands at the name already, as ``write_in`` (replaced, never
    written through)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        fd = os.open(os.path.join(folder, _name(name)), _NEW, mode)
    except FileExistsError:
        write_in(folder, name, raw, mode)
        return
    try:
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))
        raise
