"""Read a job's log file: its last lines, or a bounded run of bytes from an offset."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from air_skills.errors import InvalidState
from air_skills.home import open_job_file

MAX_LOG_BYTES = 256 * 1024


def open_log(path: str | Path) -> BinaryIO | None:
    """The job's log, opened for reading; None when not written yet. A FIFO, device or link
    in its place is refused (InvalidState), never waited on or followed."""
    try:
        return os.fdopen(open_job_file(path), "rb")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidState(
            f"the job's log {path} cannot be read: {exc.strerror or exc} (not the file the job"
            " wrote: something replaced it)",
            code="unsafe-job-file",
            hint="remove it from the job's folder; the job's output is lost",
            path=str(path),
        ) from None


@dataclass
class LogSlice:
    """A part of a log: its text, where it starts and ends (bytes), the log's size then."""

    text: str
    offset: int
    next_offset: int
    size: int
    truncated: bool = False


class BadOffset(ValueError):
    """A negative offset: offsets are what a previous read gave as next_offset."""


def read_log(path: str | Path, tail: int | None = 100, offset: int | None = None) -> LogSlice:
    """The last ``tail`` lines (at most MAX_LOG_BYTES), or with ``offset`` the bytes from there
    on (at most MAX_LOG_BYTES). A log not written yet is empty, not an error."""
    f = open_log(path)
    if f is None:
        return LogSlice("", 0, 0, 0)
    with f:
        f.seek(0, 2)
        size = f.tell()
        if offset is not None:
            if offset < 0:
                raise BadOffset("offset must be >= 0")
            start = min(offset, size)
            f.seek(start)
            data = f.read(MAX_LOG_BYTES)
            end = start + len(data)
            return LogSlice(data.decode("utf-8", "replace"), start, end, size, end < size)
        start = max(0, size - MAX_LOG_BYTES)
        f.seek(start)
        data = f.read(size - start)  # a log grown (or truncated long) since: not past size
    lines = data.split(b"\n")
    keep = (tail or 0) + (1 if data.endswith(b"\n") else 0)
    if tail is not None and len(lines) > keep:
        data = b"\n".join(lines[-keep:])
        start = size - len(data)
    return LogSlice(data.decode("utf-8", "replace"), start, size, size, start > 0)
