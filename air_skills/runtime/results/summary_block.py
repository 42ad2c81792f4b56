"""The summary block a script prints at the end: a line ``---``, then ``key: value`` lines.

The last block in the output wins. Non-numeric values are returned separately so that the
caller can warn about them instead of failing.
"""

from __future__ import annotations

import math
import os
import re

from air_skills.home import open_job_file

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,249}$")


def parse_summary(text: str) -> tuple[dict[str, float], list[str]]:
    """(numeric values, keys whose values were not numeric) of the last summary block."""
    lines = text.splitlines()
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == "---":
            start = i
            break
    if start is None:
        return {}, []
    values: dict[str, float] = {}
    bad: list[str] = []
    for line in lines[start + 1 :]:
        if ":" not in line:
            if line.strip():
                break  # the block ends at the first line that is not key: value
            continue
        key, _, raw = line.partition(":")
        key, raw = key.strip(), raw.strip()
        if not _KEY.match(key):
            break
        try:
            value = float(raw)
        except ValueError:
            bad.append(key)
            continue
        if math.isfinite(value):
            values[key] = value
        else:
            bad.append(key)
    return values, bad


def read_tail(path: str, max_bytes: int = 64 * 1024) -> str:
    try:
        with os.fdopen(open_job_file(path), "rb") as f:  # never waits on a FIFO
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes).decode("utf-8", "replace")  # grown since: not past it
    except OSError:
        return ""
