"""Reading a small file that another process (or a job) may have tampered with: opened
non-blocking and without following a symlink, a regular file only, at most a size cap, so a
FIFO never blocks the reader and a link to /dev/zero never fills its memory (home.read_job_file
reads it; failures here are Unreadable, in words)."""

from __future__ import annotations

import os
from pathlib import Path

from air_skills.home import NotRegularFile, read_job_file


class Unreadable(Exception):
    """The file cannot be read as a small regular file; ``str()`` says why, in words."""


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``; Unreadable when it is missing, a symlink, not a regular file
    (FIFO, device, folder) or larger than ``max_bytes``. Read by home.read_job_file, the one
    reader of job-folder files; this names the failure in words."""
    try:
        return read_job_file(path, max_bytes)
    except FileNotFoundError:
        raise Unreadable(f"{path.name} is missing") from None
    except NotRegularFile as exc:  # a FIFO, a device, a folder; or over max_bytes
        raise Unreadable(str(exc.strerror).replace(os.fspath(path), path.name)) from None
    except OSError as exc:  # ELOOP: a symlink
        raise Unreadable(f"{path.name} cannot be opened ({exc.strerror or exc})") from None
