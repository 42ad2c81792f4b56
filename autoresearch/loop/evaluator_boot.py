"""The trusted evaluator's process: it dies with the loop, and a resumed loop ends a stray one.

``boot_command`` wraps the evaluator's command in ``python -m autoresearch.loop.evaluator_boot
PARENT -- CMD...``: that small process asks the kernel for SIGKILL when its parent (the loop's
thread) dies (``PR_SET_PDEATHSIG``, through ctypes, kept across exec), checks the parent is
still the loop, then execs the command. The evaluator runs in its own process group, recorded
in the study folder (``running.json``) while it runs; ``end_stray`` kills that group when a
loop starts (the loop killed by -9 left it, or its children), so a resume never runs a second
evaluator beside the first. Stdlib only: the boot must start fast.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

RUNNING = "running.json"
MARKER = "AIR_EVALUATOR_OF"  # in the evaluator's environment: the study folder it serves
_PR_SET_PDEATHSIG = 1


def boot_command(command: list[str]) -> list[str]:
    """``command`` run so that it dies with this process (see the module docstring)."""
    return [sys.executable, "-m", "autoresearch.loop.evaluator_boot", str(os.getpid()), "--",
            *command]  # fmt: skip


def record(scratch: Path, pid: int, study_dir: Path) -> Path:
    """Note the running evaluator (its pid is its process group) in the study folder."""
    path = scratch / RUNNING
    path.write_text(json.dumps({"pid": pid, "start": _start_time(pid), "study": str(study_dir)}))
    return path


def end_stray(scratch: Path) -> int:
    """Kill the process group of an evaluator a dead loop left running; how many were left."""
    path = scratch / RUNNING
    try:
        rec = json.loads(path.read_text())
        pgid = int(rec["pid"])
        marker = f"{MARKER}={rec['study']}".encode()
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    left = [pid for pid in _group(pgid) if _has_marker(pid, marker)]
    if left:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    path.unlink(missing_ok=True)
    return len(left)


def _start_time(pid: int) -> str | None:
    stat = _stat(pid)
    return stat[19] if stat else None


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].decode().split()


def _group(pgid: int) -> list[int]:
    """The live processes in process group ``pgid``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat and stat[0] != "Z" and stat[2] == str(pgid):
                out.append(int(name))
    return out


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the loop died before the request: follow it now
        os._exit(137)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m autoresearch.loop.evaluator_boot PARENT_PID -- COMMAND...")
    _die_with_parent(int(argv[0]))
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f"the evaluator could not start: {argv[2]}: {exc}", file=sys.stderr)
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
