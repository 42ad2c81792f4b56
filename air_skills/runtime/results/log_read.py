"""Read a job's log file: its last lines, or a bounded run of bytes from an offset."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MAX_LOG_BYTES = 256 * 1024


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
    try:
        with open(path, "rb") as f:
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
            data = f.read()
    except FileNotFoundError:
        return LogSlice("", 0, 0, 0)
    lines = data.split(b"\n")
    keep = (tail or 0) + (1 if data.endswith(b"\n") else 0)
    if tail is not None and len(lines) > keep:
        data = b"\n".join(lines[-keep:])
        start = size - len(data)
    return LogSlice(data.decode("utf-8", "replace"), start, size, size, start > 0)
