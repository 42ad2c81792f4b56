"""Search a job's log with a regular expression: matching lines, their numbers and byte offsets."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

MAX_PATTERN_CHARS = 500
MAX_MATCHES = 200
# A line is searched in its first MAX_LINE_BYTES only: a pattern that backtracks badly then
# costs at most that much per line, and a log without newlines cannot stall the search.
MAX_LINE_BYTES = 8_192
MAX_SHOWN_CHARS = 300


class BadPattern(ValueError):
    """The pattern is not a regular expression Python accepts (or is too long)."""


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


def compile_pattern(pattern: str) -> re.Pattern[str]:
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise BadPattern(f"a pattern has 1 to {MAX_PATTERN_CHARS} characters")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise BadPattern(f"bad regular expression {pattern[:80]!r}: {exc}") from None


def search_log(
    path: str | Path, pattern: str, last_match: bool = False, max_matches: int = 20
) -> LogSearch:
    """The first ``max_matches`` matching lines (the last ones with ``last_match``)."""
    regex = compile_pattern(pattern)
    keep = max(1, min(max_matches, MAX_MATCHES))
    found: deque[LogMatch] = deque(maxlen=keep if last_match else None)
    result = LogSearch(pattern=pattern)
    offset = 0
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return result
    with f:
        for number, raw in enumerate(f, start=1):
            result.lines = number
            text = raw[:MAX_LINE_BYTES].decode("utf-8", "replace").rstrip("\r\n")
            if regex.search(text):
                result.total += 1
                if last_match or len(found) < keep:
                    found.append(LogMatch(number, offset, text[:MAX_SHOWN_CHARS]))
            offset += len(raw)
    result.size = offset
    result.matches = list(found)
    return result
