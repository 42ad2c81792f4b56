"""Process identity on Linux: a pid plus its start time, so a reused pid is never mistaken."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Collection


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":  # a zombie has exited
        return None
    return fields[19].decode()


def alive(pid: int | None, start: str | None) -> bool:
    if not pid:
        return False
    now = start_time(pid)
    return now is not None and (start is None or now == start)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


_own_start: str | None = None


def own_start() -> str:
    """This process's start time (see start_time), read once."""
    global _own_start
    if _own_start is None:
        _own_start = start_time(os.getpid()) or ""
    return _own_start


# --- a job's whole process tree: the supervisor as child subreaper, and the sweep --------------

_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux), instead of init.

    A job's child that leaves the job's process group (``setsid``) and outlives its parent is
    then still ours to find and end. Kept across exec; not inherited by children.
    """
    global _subreaper
    if not _subreaper and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


def is_subreaper() -> bool:
    return _subreaper


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1])


def _is_supervisor(pid: int) -> bool:
    """Whether ``pid`` runs another job's supervisor (its tree is that supervisor's to end)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"air_skills.runtime.supervision.supervisor" in f.read()
    except OSError:
        return False


def _children(pid: int) -> list[int] | None:
    """``pid``'s children from ``/proc/<pid>/task/*/children`` (every thread's: an orphan
    handed to a subreaper may hang under any of its threads); None where the kernel has no
    such file (CONFIG_PROC_CHILDREN off), [] for a process that is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return out


def _parents_of_all() -> tuple[dict[int, list[int]], dict[int, str]]:
    """Every process's children and state, from a scan of all of /proc (the slow fallback)."""
    parents: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None:
            states[int(name)] = st[0]
            parents.setdefault(st[1], []).append(int(name))
    return parents, states


def descendants(root: int, spare: Collection[int] = ()) -> tuple[list[int], list[int]]:
    """(live, zombie) descendants of ``root``, not descending into ``spare`` pids or into
    other supervisors (which an orphaned double fork hands to a subreaper).

    Walks down from ``root`` through each process's ``children`` file, reading only the
    tree's own entries: a supervisor runs this after every job, and a scan of every process
    on a busy machine costs milliseconds of CPU beside the next job's start."""
    scan: tuple[dict[int, list[int]], dict[int, str]] | None = None

    def children(pid: int) -> list[int]:
        nonlocal scan
        if scan is None:
            found = _children(pid)
            if found is not None:
                return found
            scan = _parents_of_all()
        return scan[0].get(pid, [])

    def state(pid: int) -> str | None:
        if scan is not None:
            return scan[1].get(pid)
        st = _stat(pid)
        return st[0] if st is not None else None

    live: list[int] = []
    zombies: list[int] = []
    todo = children(root)
    while todo:
        pid = todo.pop()
        if pid in spare:
            continue
        st = state(pid)
        if st is None:
            continue  # gone meanwhile
        if st == "Z":
            zombies.append(pid)
            continue
        if _is_supervisor(pid):
            continue
        live.append(pid)
        todo.extend(children(pid))
    return live, zombies


def reap_children(keep: Collection[int] = ()) -> None:
    """Reap this process's exited children except ``keep`` (an adopted orphan, once ended,
    would otherwise stay a zombie); never ``waitpid(-1)``: that could take the job's status."""
    _, zombies = descendants(os.getpid(), keep)
    for pid in zombies:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not our child: its own parent reaps it


def sweep_descendants(spare: Collection[int] = (), rounds: int = 50) -> int:
    """SIGKILL every descendant of this process except ``spare`` and other supervisors'
    trees; returns how many were killed. Repeated while any are left: a killed process's
    children come to this process (a subreaper) and are found on the next round."""
    killed = 0
    me = os.getpid()
    for _ in range(rounds):
        live, zombies = descendants(me, spare)
        for pid in zombies:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not live:
            break
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return killed


# --- a job's processes wherever they are: by the AIR_JOB_ID entry in their environment -------


def _environ_has(pid: int, entries: Collection[bytes]) -> bool:
    """Whether ``pid``'s initial environment holds every ``NAME=value`` of ``entries``; False
    when it cannot be read (another user's process, gone, a zombie)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = b"\0" + f.read() + b"\0"
    except OSError:
        return False
    return all(b"\0" + e + b"\0" in data for e in entries)


def job_processes(
    job_id: str, attempt: int | None = None, spare: Collection[int] = ()
) -> list[int]:
    """Live processes started for ``job_id`` (each carries ``AIR_JOB_ID=<id>``; with
    ``attempt``, only that attempt's, by ``AIR_ATTEMPT``: a retry started meanwhile is spared),
    found in one pass over /proc. Never this process, ``spare``, or a supervisor: one started
    from inside a job inherits that job's AIR_JOB_ID in its own environment."""
    entries = [f"AIR_JOB_ID={job_id}".encode()]
    if attempt is not None:
        entries.append(f"AIR_ATTEMPT={attempt}".encode())
    found: list[int] = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me or pid in spare or not _environ_has(pid, entries):
            continue
        st = _stat(pid)
        if st is None or st[0] == "Z" or _is_supervisor(pid):
            continue
        found.append(pid)
    return found


def sweep_job(job_id: str, attempt: int | None = None, spare: Collection[int] = ()) -> int:
    """SIGKILL every process of ``job_id`` (see job_processes); returns how many were killed.

    The backstop for what the job's process group does not hold: torchrun starts each rank in
    a session of its own, so a job whose supervisor is lost would otherwise leave its ranks.
    """
    killed = 0
    for pid in job_processes(job_id, attempt, spare):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed
