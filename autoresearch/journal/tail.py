"""A journal read incrementally: the state replayed so far and the byte offset it reaches; a
read applies only the whole lines appended since, and reads the file whole when it was replaced
(another inode), shrank, changed before the offset, or ends in a line not yet whole.

For a reader that looks again and again (the study page's server): a 1,000-trial journal is
about 1 MB, and replaying it whole on every appended line costs ~100 ms of CPU.
"""

from __future__ import annotations

import copy
import os
import stat
import threading
from pathlib import Path

from air_skills.errors import InvalidState
from autoresearch.journal.journal import Journal, StudyState, replay
from autoresearch.spec.safe_read import read_regular

CHECK_BYTES = 256  # the bytes just before the offset (and the first ones), compared each read


class JournalTail:
    """The state of one study folder's journal, brought up to date by ``read``. Thread-safe;
    the states it hands out are never changed afterwards (each read applies to a fork)."""

    def __init__(self, study_dir: Path) -> None:
        self.journal = Journal(study_dir)
        self.path = self.journal.path
        self.full_reads = 0  # how often the file was read whole (for tests and the bench)
        self._lock = threading.Lock()
        self._state = StudyState()  # as replayed: no notes about skipped lines
        self._out: StudyState | None = None  # handed out: with those notes
        self._file: tuple[int, int, int, int] | None = None  # dev, inode, size, mtime_ns
        self._offset = 0
        self._lines = 0  # whole lines up to the offset
        self._head = b""
        self._before = b""  # the CHECK_BYTES before the offset
        self._mid_line = False  # the offset is not at a line's end (the last read was whole)

    def read(self) -> StudyState:
        """The study's state as the journal has it now (an empty state when there is none)."""
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except FileNotFoundError:
                self._reset()
                return self._handed_out()
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):  # refused, with read_regular's error
                    read_regular(self.path, "study journal", max_bytes=None, error=InvalidState)
                seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
                if seen == self._file and self._out is not None:
                    return self._out
                if self._can_append(fd, info, seen):
                    self._append(fd, info.st_size)
                else:
                    self._whole(fd)
                self._file = seen
            finally:
                os.close(fd)
            return self._handed_out()

    # --- inside the lock ------------------------------------------------------------------

    def _reset(self) -> None:
        self._state, self._out, self._file = StudyState(), None, None
        self._offset, self._lines, self._head, self._before = 0, 0, b"", b""
        self._mid_line = False
        self.journal.unreadable, self.journal.skipped, self.journal.lines = 0, [], []

    def _can_append(self, fd: int, info: os.stat_result, seen: tuple) -> bool:
        """Whether the file is the one read so far, with lines only added after the offset."""
        if self._file is None or self._mid_line or seen[:2] != self._file[:2]:
            return False
        if info.st_size < self._offset:
            return False  # truncated
        if info.st_size == self._offset:
            return False  # same size, another mtime: rewritten in place (rare): read it whole
        head = os.pread(fd, len(self._head), 0)
        start = self._offset - len(self._before)
        return head == self._head and os.pread(fd, len(self._before), start) == self._before

    def _append(self, fd: int, size: int) -> None:
        data = os.pread(fd, size - self._offset, self._offset)
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a line not yet whole (being written, or torn by a kill -9)
            self._whole(fd)
            return
        events = self.journal.parse(data, self._lines + 1)
        state = self._state.fork()
        replay(events, state)
        self._took(data, state)

    def _whole(self, fd: int) -> None:
        """Read the open file whole, from its start (the one just checked to be regular)."""
        self.full_reads += 1
        self._reset()
        parts, at = [], 0
        while chunk := os.pread(fd, 1 << 20, at):
            parts.append(chunk)
            at += len(chunk)
        data = b"".join(parts)
        self._head = data[:CHECK_BYTES]
        self._mid_line = bool(data) and not data.endswith(b"\n")
        self._took(data, replay(self.journal.parse(data)))

    def _took(self, data: bytes, state: StudyState) -> None:
        self._state, self._out = state, None
        self._offset += len(data)
        self._lines += data.count(b"\n")
        if len(self._head) < CHECK_BYTES:
            self._head = (self._head + data)[:CHECK_BYTES]
        self._before = (self._before + data)[-CHECK_BYTES:]

    def _handed_out(self) -> StudyState:
        if self._out is None:
            out = copy.copy(self._state)  # its own list of warnings: the notes go on it
            out.warnings = self._state.warnings + self.journal.notes(self._state)
            self._out = out
        return self._out
