"""A job's one-line summary and the escape of control characters, without rich or typer.

cli/output.py prints the line through rich (its status coloured on a terminal); the fast path
(cli/fast/launch.py) writes it as it is where rich would write the same bytes (``write_plain``)
and leaves the rest to cli/output.py. A test compares the two over awkward text.
"""

from __future__ import annotations

import os
import re
from typing import Any, TextIO

# What a terminal would obey rather than show (ESC sequences, C1, DEL, bidi reordering): text
# from the store (an older record's name, a message) shows them as \x1b escapes. Newlines and
# tabs stay. Log output (`air logs`) is the job's own bytes and is written as it is.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What rich changes in a line it prints plainly: it expands tabs and drops BEL, BS, VT, FF
# and CR (rich/control.py's STRIP_CONTROL_CODES) from text it is given as Text.
RICH_CHANGES = re.compile("[\t\x07\x08\x0b\x0c\x0d]")


def printable(text: str) -> str:
    """``text`` with every terminal control character written as a visible escape."""
    return CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def job_parts(job_id: str, status: str, gpus: list[Any], message: str) -> tuple[str, str, str]:
    """(before the status, the status, after it): the line `air launch`, `air wait` and
    `air cancel` print for a job."""
    return f"{job_id}  ", status, f"  gpus={','.join(map(str, gpus)) or '-'}  {message}"


def write_plain(stream: TextIO, text: str) -> bool:
    """Write ``text`` and a newline to ``stream`` as rich's ``say`` would (cli/output.py), and
    say True, where that is plain text: ``stream`` is no terminal (nor forced to be one: rich's
    TTY_COMPATIBLE and FORCE_COLOR) and ``text`` holds nothing rich would change. False,
    writing nothing: print it through cli/output.py."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return False
    if RICH_CHANGES.search(text):
        return False
    try:
        if stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    stream.write(printable(text) + "\n")
    return True
