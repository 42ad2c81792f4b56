"""A local gang's rendezvous, watched by its supervisor: a deadline for ranks that never join.

torchrun starts every rank of a one-node gang at once, so its own join_timeout never fires
there; a rank that hangs or sleeps before ``init_process_group`` would leave the others
blocked in it until torch's process-group timeout (30 min for gloo). Each Python rank runs
through rank_boot.py, which creates ``<job folder>/rendezvous/<attempt>/<RANK>`` when the
rank enters ``init_process_group`` and ``<RANK>.met`` when the call returns. Once the first
rank has been there for the rendezvous timeout and some have not arrived, or every rank has
arrived and some have not met the others within the timeout after the last arrival (a rank
that changed MASTER_PORT waits alone), the supervisor stops the gang and fails it with a
message naming the ranks. A command that never calls ``init_process_group`` is never affected.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.home import read_launch_env
from air_skills.runtime.execution import gang
from air_skills.runtime.results.outcomes import AttemptEnd, Outcome, classify
from air_skills.runtime.results.summary_block import read_tail

NAME = "AIR_RENDEZVOUS_TIMEOUT_S"
MET = ".met"  # rank_boot.py's mark of a rank whose init_process_group returned
NEVER_MET = "never met the others"
BOOT = os.fspath(Path(__file__).with_name("rank_boot.py"))


def join_dir(jdir: Path, attempt: int) -> str:
    """Where the ranks of attempt ``attempt`` note their arrival (one empty file per rank)."""
    return os.fspath(jdir / "rendezvous" / str(attempt))


def timeout_s(launched: dict[str, str] | None = None) -> float:
    """AIR_RENDEZVOUS_TIMEOUT_S as the job was launched with it (else this process's)."""
    if launched and settings.raw(NAME, launched) and not settings.problem(NAME, launched):
        return float(settings.get(NAME, launched))
    return float(settings.get(NAME))


@dataclass(frozen=True)
class Timeout:
    """The ranks that joined and those that never did, past the deadline; or, all joined,
    those whose init_process_group never returned (``unmet``)."""

    timeout_s: float
    joined: list[int]
    missing: list[int]
    unmet: list[int] = field(default_factory=list)


def _ranks(ranks: list[int]) -> str:
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {', '.join(str(r) for r in ranks)}"


def describe_late(late: Timeout, log_path: str) -> str:
    """``rendezvous timed out after 5 s: rank 0 joined; rank 1 never joined (last line: ..)``"""
    if not late.missing:
        return (
            f"rendezvous timed out after {late.timeout_s:g} s: {_ranks(late.joined)} entered"
            f" init_process_group; {_ranks(late.unmet)} {NEVER_MET} (a rank that changes"
            " MASTER_ADDR or MASTER_PORT, or uses another init_method, waits alone)"
        )
    first = late.missing[0]
    last = gang.last_error_line(gang.rank_lines(gang.attempt_output(read_tail(log_path)), first))
    said = f"last line: {last!r}" if last else "no output"
    whose = f"rank {first}'s " if len(late.missing) > 1 else ""
    return (
        f"rendezvous timed out after {late.timeout_s:g} s: {_ranks(late.joined)} joined;"
        f" {_ranks(late.missing)} never joined ({whose}{said})"
    )


class JoinWatch:
    """Reads the arrivals of one attempt's ranks; cheap enough for every supervisor tick."""

    def __init__(self, folder: str, world: int, timeout: float) -> None:
        self.folder = folder
        self.world = world
        self.timeout = timeout
        self.first: float | None = None  # the first arrival (wall clock, the file's mtime)
        self.last: float | None = None  # the last arrival, once every rank has arrived
        self.done = False  # every rank met the others: torch takes it from there

    def check(self, now: float | None = None) -> Timeout | None:
        """A Timeout once the first rank has waited ``timeout`` s for ranks that never came."""
        if self.done:
            return None
        try:
            names = os.listdir(self.folder)
        except OSError:
            return None  # no rank has called init_process_group (yet, or ever)
        joined = sorted(int(n) for n in names if n.isdigit())
        met = {int(n[: -len(MET)]) for n in names if n.endswith(MET) and n[: -len(MET)].isdigit()}
        if len(met) >= self.world:
            self.done = True
            return None
        now = time.time() if now is None else now
        try:
            if self.first is None and joined:
                self.first = min(self._mtime(r) for r in joined)
            if self.last is None and len(joined) >= self.world:
                self.last = max(self._mtime(r) for r in joined)
        except OSError:
            return None
        if self.first is None or now - self.first < self.timeout:
            return None
        missing = [r for r in range(self.world) if r not in joined]
        if missing:
            return Timeout(self.timeout, joined, missing)
        if self.last is None or now - self.last < self.timeout:
            return None  # all came: the group forms within the timeout after the last
        unmet = [r for r in range(self.world) if r not in met]
        return Timeout(self.timeout, joined, [], unmet)

    def _mtime(self, rank: int) -> float:
        return os.stat(os.path.join(self.folder, str(rank))).st_mtime


def late_outcome(what: str, row: Any, spec: dict[str, Any]) -> Outcome:
    """The job's next state after a rendezvous timeout (``what``, from describe_late): a
    failure of the job's own code, retried under max_retries as any, told in its own words."""
    end = AttemptEnd(
        row.job_id,
        signal="SIGTERM",  # the supervisor stopped the gang
        user_retries=row.user_retries,
        max_retries=spec.get("max_retries", 0),
    )
    out = classify(end)
    if out.action == "requeue":
        retry = f"retry {end.user_retries + 1} of {end.max_retries}"
        return replace(out, message=f"QUEUED: {what}; {retry}")
    if NEVER_MET in what:
        return replace(
            out,
            message=f"FAILED: {what}; every rank was stopped. Next: let every rank rendezvous"
            " at the MASTER_ADDR and MASTER_PORT torchrun set (init_method env://, never"
            f" changed by the script; read `air logs {end.job_id} --rank N`), then relaunch",
        )
    return replace(
        out,
        message=f"FAILED: {what}; every rank was stopped. Next: make every rank call"
        f" init_process_group within {NAME} (read `air logs {end.job_id} --rank"
        " N`), then relaunch",
    )


_NO_ARG_FLAGS = frozenset({"-u", "-B", "-O", "-OO", "-s", "-E"})


def _script_at(command: list[str]) -> int | None:
    """Where the script (or ``-c``/``-m``) starts in ``python [-u...] (SCRIPT | -c CODE | -m
    MODULE) ARGS``; None for any other command."""
    if not gang.is_python(command[0]):
        return None
    i = 1
    while i < len(command) and command[i] in _NO_ARG_FLAGS:
        i += 1
    rest = command[i:]
    if not rest or (rest[0].startswith("-") and (rest[0] not in ("-c", "-m") or len(rest) < 2)):
        return None
    return i


def boot_command(command: list[str], folder: str) -> list[str]:
    """``command`` run through rank_boot.py when it is a Python script, ``-c`` or ``-m``;
    any other command as is (it then has no rendezvous deadline)."""
    i = _script_at(command)
    return command if i is None else [*command[:i], BOOT, folder, *command[i:]]


def watch_joins(jdir: Path, row: Any, spec: dict[str, Any], gpus: list[int]) -> JoinWatch | None:
    """The watch of a local gang's rendezvous (None: not a gang, or its ranks do not boot
    through rank_boot.py: a container's, or a command that is not a Python script)."""
    world = gang.procs_of(spec, len(gpus))
    if world < 2 or spec.get("image") or _script_at(spec["command"]) is None:
        return None
    return JoinWatch(join_dir(jdir, row.attempts), world, timeout_s(read_launch_env(jdir)))
