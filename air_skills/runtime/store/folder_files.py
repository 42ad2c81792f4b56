"""Reading a small file that another process (or a job) may have tampered with: opened
non-blocking and without following a symlink, a regular file only, at most a size cap, so a
FIFO never blocks the reader and a link to /dev/zero never fills its memory. Stdlib only."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class Unreadable(Exception):
    """The file cannot be read as a small regular file; ``str()`` says why, in words."""


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``; Unreadable when it is missing, a symlink, not a regular file
    (FIFO, device, folder) or larger than ``max_bytes``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Unreadable(f"{path.name} is missing") from None
    except OSError as exc:  # ELOOP: a symlink
        raise Unreadable(f"{path.name} cannot be opened ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{path.name} is not a regular file")
        if st.st_size > max_bytes:
            raise Unreadable(f"{path.name} is over {max_bytes} bytes ({st.st_size})")
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:  # grew while read
            raise Unreadable(f"{path.name} is over {max_bytes} bytes")
        return data
    except OSError as exc:
        raise Unreadable(f"{path.name} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
