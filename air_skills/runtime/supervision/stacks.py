"""Evidence of what a job was doing: every process's stack, taken before anything is killed.

A Python process is read with ``py-spy dump`` (native frames where it can); any other process
gets its ``/proc`` state and wchan (the kernel function it sleeps in). The dumps go to
``stacks.txt`` in the job's folder; ``summary`` turns them into one line (``rank 1 in
all_reduce (distributed_c10d.py:2806) from train.py:12; rank 0 in train.py:9 <module>``), and
``collective_wait`` says whether a rank sits in a collective or a rendezvous (an infra hang).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.home import open_job_file
from air_skills.job_folder import write_in

PY_SPY_TIMEOUT_S = 10.0
# torch.distributed calls that wait for the other ranks: a rank stuck in one is waiting for a
# peer (or the network), not running its own code.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "gather",
        "scatter",
        "send",
        "recv",
        "init_process_group",
        "rendezvous",
        "_store_based_barrier",
        "new_group",
    }
)
_FRAME = re.compile(r"^\s+(?P<func>.+?) \((?P<file>.+?):(?P<line>\d+)\)\s*$")
_THREAD = re.compile(r'^Thread (?:0x[0-9a-fA-F]+|\d+) \([^)]*\)(?:: "(?P<name>.*)")?')
_LIBRARY = ("site-packages", "dist-packages", f"python{sys.version_info[0]}.")


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    line: int

    def is_library(self) -> bool:
        return any(part in self.file for part in _LIBRARY) or self.file.startswith("<frozen")

    def is_collective(self) -> bool:
        return self.func in COLLECTIVES and "distributed" in self.file


@dataclass
class ProcessStack:
    """One process's dump: its rank (a gang's), main-thread frames (innermost first), text."""

    pid: int
    rank: int | None
    text: str
    frames: list[Frame] = field(default_factory=list)
    python: bool = False

    def where(self) -> str:
        """``all_reduce (distributed_c10d.py:2806) from train.py:12`` or ``train.py:9 step()``;
        for a process py-spy could not read, its kernel state and wchan."""
        if not self.frames:  # the kernel's view: its first line without the argv
            first = self.text.strip().splitlines()[0] if self.text.strip() else "no stack"
            return first.rpartition("): ")[2]
        inner = self.frames[0]
        user = next((f for f in self.frames if not f.is_library()), None)
        if user is inner:
            return f"{os.path.basename(inner.file)}:{inner.line} {inner.func}()"
        text = f"{inner.func} ({os.path.basename(inner.file)}:{inner.line})"
        if user is not None:
            text += f" from {os.path.basename(user.file)}:{user.line}"
        return text


def py_spy() -> str | None:
    """The py-spy executable: beside this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return os.fspath(here) if here.exists() else shutil.which("py-spy")


def _rank(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for entry in env:
        if entry.startswith(b"RANK="):
            value = entry[5:]
            return int(value) if value.isdigit() else None
    return None


def _proc_text(pid: int) -> str:
    """``state S (sleeping), wchan do_epoll_wait``: what the kernel says a process waits on."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("State:")), "?")
    except OSError:
        return f"pid {pid}: gone"
    try:
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip() or "0"
    except OSError:
        wchan = "?"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read().replace(b"\0", b" ").replace(b"\n", b" ")
            argv = raw.decode(errors="replace").strip()[:200]
    except OSError:
        argv = "?"
    return f"pid {pid} ({argv}): state {state}, wchan {wchan}"


def _is_python(pid: int) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe.startswith("python") or exe.startswith("pypy")


def parse_main_frames(dump: str) -> list[Frame]:
    """The frames (innermost first) of the dump's main thread (else its first thread)."""
    threads: list[tuple[str, list[Frame]]] = []
    for line in dump.splitlines():
        m = _THREAD.match(line)
        if m:
            threads.append((m.group("name") or "", []))
            continue
        f = _FRAME.match(line)
        # Python frames only: native ones (--native) name a .so or a C++ file.
        if f and threads and (f.group("file").endswith(".py") or f.group("file").startswith("<")):
            threads[-1][1].append(Frame(f.group("func"), f.group("file"), int(f.group("line"))))
    for name, frames in threads:
        if name == "MainThread" and frames:
            return frames
    return next((frames for _, frames in threads if frames), [])


def _spawn(exe: str | None, pid: int, native: bool) -> subprocess.Popen[str] | None:
    if exe is None or not _is_python(pid):
        return None
    argv = [exe, "dump", "--full-filenames", "--pid", str(pid)] + (["--native"] if native else [])
    try:
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    except OSError:
        return None


def _collect(proc: subprocess.Popen[str] | None, deadline: float) -> tuple[str, bool]:
    """(output, whether py-spy read the stack) of one dump, within the deadline."""
    if proc is None:
        return "", False
    try:
        text, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "py-spy did not answer in time", False
    return text, proc.returncode == 0


def dump(pids: list[int], timeout_s: float = PY_SPY_TIMEOUT_S) -> list[ProcessStack]:
    """Every process's stack, the dumps taken side by side (each within ``timeout_s``):
    with native frames first, without them where native unwinding fails."""
    exe = py_spy()
    deadline = time.monotonic() + timeout_s
    first = [(pid, _spawn(exe, pid, True)) for pid in pids]
    got = {pid: _collect(proc, deadline) for pid, proc in first}
    again = [(pid, _spawn(exe, pid, False)) for pid, proc in first if proc and not got[pid][1]]
    deadline = time.monotonic() + timeout_s
    for pid, proc in again:
        text, ok = _collect(proc, deadline)
        if ok:
            got[pid] = (text, ok)
    out = []
    for pid in pids:
        text, python = got[pid]
        if not python:  # py-spy could not read it (or it is not Python): the kernel's view
            kernel = _proc_text(pid)
            text = f"{kernel}\n{text.strip()}" if text.strip() else kernel
        frames = parse_main_frames(text) if python else []
        out.append(ProcessStack(pid, _rank(pid), text, frames, python))
    return out


def pick(stacks: list[ProcessStack]) -> list[ProcessStack]:
    """The processes that the summary names: each rank of a gang (else the Python ones with
    frames, else all): torchrun's own agent is left out where there are ranks."""
    ranked = sorted((s for s in stacks if s.rank is not None), key=lambda s: s.rank or 0)
    if ranked:
        return ranked
    framed = [s for s in stacks if s.frames]
    return framed or stacks


def summary(stacks: list[ProcessStack]) -> str:
    """One line: ``rank 1 in all_reduce (distributed_c10d.py:2806); rank 0 in t.py:9 f()``."""
    parts = []
    for s in pick(stacks)[:8]:
        who = f"rank {s.rank}" if s.rank is not None else f"pid {s.pid}"
        parts.append(f"{who} in {s.where()}")
    return "; ".join(parts) or "no process left to read"


def collective_wait(stacks: list[ProcessStack]) -> bool:
    """Whether some process waits in a torch.distributed collective or rendezvous."""
    return any(f.is_collective() for s in stacks for f in s.frames)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc's CPU times are counted in these per second


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """CPU time (user + system, in CLOCK_TICKS) each process has used; gone ones left out."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            out[pid] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        except (OSError, ValueError, IndexError):
            continue
    return out


def main_frames(stacks: list[ProcessStack]) -> dict[int, list[list[Any]]]:
    """The main-thread frames of the processes ``pick`` names (a gang's ranks, not torchrun's
    polling agent) as ``[func, file, line]`` lists (JSON-ready): whether a stack changed
    between two samples."""
    return {s.pid: [[f.func, f.file, f.line] for f in s.frames] for s in pick(stacks) if s.frames}


def write_new(path: Path, text: str) -> bool:
    """Write ``text`` as ``path`` in a job's folder, which the job may write too: a fresh file
    (never opened through a link the job left there) renamed over whatever had the name."""
    try:
        write_in(path.parent, path.name, text)  # job_folder.py: O_EXCL|O_NOFOLLOW, renameat
    except OSError:
        return False
    return True


def read_small(path: Path, limit: int = 4096) -> str | None:
    """A small regular file of a job's folder, opened without blocking or following a link
    (a FIFO left there must not hang the supervisor); None for anything else."""
    try:
        with os.fdopen(open_job_file(path), "rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:  # missing, a link, a FIFO or a device
        return None


def save(path: Path, stacks: list[ProcessStack], headline: str) -> str | None:
    """Write the dumps to ``path`` (the job's stacks.txt); its path, or None if it failed."""
    body = [headline, ""]
    for s in stacks:
        who = f"rank {s.rank}, " if s.rank is not None else ""
        body += [f"=== {who}pid {s.pid} ===", s.text.rstrip(), ""]
    return os.fspath(path) if write_new(path, "\n".join(body)) else None
