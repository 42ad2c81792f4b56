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

from air_skills.runtime.results.log_read import open_log

MAX_PATTERN_CHARS = 500
MAX_MATCHES = 200
# A line is searched in its first MAX_LINE_BYTES only: a pattern that backtracks badly then
# costs at most that much per line, and a log without newlines cannot stall the search.
MAX_LINE_BYTES = 8_192
MAX_SHOWN_CHARS = 300
DEADLINE_S = 20.0  # a search of a huge log stops here and says where (searched < size)
CHECK_EVERY_LINES = 4096


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
    total: int = 0  # matching lines in the whole log (matches holds at most max_matches)
    lines: int = 0  # lines searched
    size: int = 0  # log size in bytes when searched
    searched: int = 0  # bytes searched: less than size when the deadline stopped the search


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
) -> LogSearch:
    """The first ``max_matches`` matching lines (the last ones with ``last_match``); a search
    still running after ``deadline_s`` stops there (``searched`` < ``size``)."""
    regex = compile_pattern(pattern)
    keep = max(1, min(max_matches, MAX_MATCHES))
    found: deque[LogMatch] = deque(maxlen=keep if last_match else None)
    result = LogSearch(pattern=pattern)
    offset = 0
    f = open_log(path)  # a FIFO in the log's place is refused, not waited on
    if f is None:
        return result
    stop_at = time.monotonic() + deadline_s
    with f:
        result.size = _size(f)
        for number, raw in enumerate(f, start=1):
            result.lines = number
            text = raw[:MAX_LINE_BYTES].decode("utf-8", "replace").rstrip("\r\n")
            if regex.search(text):
                result.total += 1
                if last_match or len(found) < keep:
                    found.append(LogMatch(number, offset, text[:MAX_SHOWN_CHARS]))
            offset += len(raw)
            if number % CHECK_EVERY_LINES == 0 and time.monotonic() > stop_at:
                break
    result.searched = offset
    result.size = max(result.size, offset)
    result.matches = list(found)
    return result


def _size(f: Any) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except OSError:
        return 0
