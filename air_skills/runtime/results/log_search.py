"""Search a job's log with a regular expression: matching lines, their numbers and byte offsets.

Patterns run in RE2 (google-re2): linear time in the line's length whatever the pattern, so a
pattern such as ``(a+)+$`` cannot stall a server; what RE2 does not support (look-arounds,
back-references) is refused. A search also stops at a deadline and says how far it read.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.runtime.results.log_read import open_log

MAX_PATTERN_CHARS = 500
MAX_MATCHES = 200
# A line is searched in its first MAX_LINE_BYTES only: a pattern that backtracks badly then
# costs at most that much per line, and a log without newlines is never held whole: the rest
# of a longer line is skipped as it streams by.
MAX_LINE_BYTES = 8_192
MAX_SHOWN_CHARS = 300
DEADLINE_S = 20.0  # a search of a huge log stops here and says where (searched < size)
CHUNK_BYTES = 1 << 20  # read at a time; the deadline is checked after each chunk


class BadPattern(ValueError):
    """The pattern is not a regular expression RE2 accepts (or is too long)."""


@dataclass
class LogMatch:
    line: int  # 1-based line number
    offset: int  # byte offset where the line starts
    text: str  # the line, cut to MAX_SHOWN_CHARS


@dataclass
class LogSearch:
    pattern: str
    matches: list[LogMatch] = field(default_factory=list)
    total: int = 0  # matching lines in the part searched (matches holds at most max_matches)
    lines: int = 0  # lines searched (numbered from ``start``: line 1 begins there)
    size: int = 0  # log size in bytes when searched
    searched: int = 0  # the byte the search reached: less than size when it stopped early
    start: int = 0  # the byte the search began at (a previous search's stopped_at)
    stopped_at: int | None = None  # where to go on from (``start=``), when it stopped early
    stopped_by: str | None = None  # "deadline" or "byte cap" (AIR_LOG_SEARCH_MAX_MB)


def compile_pattern(pattern: str) -> Any:
    """The pattern compiled by RE2; BadPattern for one it refuses (RE2 syntax, 1-500 chars)."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise BadPattern(f"a pattern has 1 to {MAX_PATTERN_CHARS} characters")
    import re2  # google-re2: only a search pays its import

    options = re2.Options()
    options.log_errors = False  # the error is ours to word, not a line on stderr
    try:
        return re2.compile(pattern, options)
    except (re2.error, TypeError, ValueError) as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise BadPattern(f"pattern {pattern[:80]!r} is not one RE2 accepts: {reason}") from None


def search_log(
    path: str | Path,
    pattern: str,
    last_match: bool = False,
    max_matches: int = 20,
    deadline_s: float = DEADLINE_S,
    start: int = 0,
    max_bytes: int | None = None,
) -> LogSearch:
    """The first ``max_matches`` matching lines (the last ones with ``last_match``) of the log
    from byte ``start`` on. It reads in chunks of CHUNK_BYTES, at most ``max_bytes`` (default
    AIR_LOG_SEARCH_MAX_MB) and until ``deadline_s``, checked after each chunk; stopped early,
    ``stopped_at`` is the byte to go on from. Memory stays bounded whatever the log holds: a
    line is kept to its first MAX_LINE_BYTES, the rest skipped as it streams by."""
    regex = compile_pattern(pattern)
    keep = max(1, min(max_matches, MAX_MATCHES))
    found: deque[LogMatch] = deque(maxlen=keep if last_match else None)
    start = max(0, int(start))
    result = LogSearch(pattern=pattern, start=start, searched=start)
    f = open_log(path)  # a FIFO in the log's place is refused, not waited on
    if f is None:
        return result
    if max_bytes is None:
        max_bytes = int(float(settings.get("AIR_LOG_SEARCH_MAX_MB")) * (1 << 20))
    stop_at = time.monotonic() + deadline_s
    with f:
        result.size = _size(f)
        end = min(result.size, start + max(1, max_bytes))  # a log still growing: as it was
        pos = start  # the byte after the last one read
        line_start = start  # where the line being read began
        head = bytearray()  # its first MAX_LINE_BYTES
        number = 0

        def finish_line() -> None:
            nonlocal number
            number += 1
            text = bytes(head).decode("utf-8", "replace").rstrip("\r\n")
            if regex.search(text):
                result.total += 1
                if last_match or len(found) < keep:
                    found.append(LogMatch(number, line_start, text[:MAX_SHOWN_CHARS]))

        f.seek(start)
        while pos < end:
            chunk = f.read(min(CHUNK_BYTES, end - pos))
            if not chunk:
                break  # the log shrank meanwhile
            i = 0
            while i < len(chunk):
                nl = chunk.find(b"\n", i)
                stop = len(chunk) if nl < 0 else nl
                room = MAX_LINE_BYTES - len(head)
                if room > 0:
                    head += chunk[i : min(stop, i + room)]
                if nl < 0:
                    break
                finish_line()
                head.clear()
                line_start = pos + nl + 1
                i = nl + 1
            pos += len(chunk)
            if pos < end and time.monotonic() > stop_at:
                result.stopped_by = "deadline"
                break
        if head or (pos > line_start and pos >= result.size):
            finish_line()  # the last line, without its newline (or cut where the search stopped)
        if pos < result.size and result.stopped_by is None:
            result.stopped_by = "byte cap"
    result.lines = number
    result.searched = pos
    result.stopped_at = pos if pos < result.size else None
    result.matches = list(found)
    return result


def _size(f: Any) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except OSError:
        return 0
