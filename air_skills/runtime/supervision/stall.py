"""Stall detection on the supervisor's tick: a job that stops moving is found, read and acted on.

One rule says what progress is: a new step of a metric of the job's MLflow run (the same step
logged again is not), new log content (a line or ``\\r``-refresh not among the last lines seen:
the same text printed or redrawn again is no progress), a main-thread stack that changed between
two samples, a GPU of the job busy (utilisation from the provider), CPU time above
CPU_BUSY_CORES of a core summed over the job's processes, but never while a stack shows a
collective or rendezvous wait (a spinning NCCL wait is a hang, not work), or a phase opened or
closed (``air_skills.job.phase``). Each tick costs a ``stat`` or two; the log's new bytes are
read (at most LOG_LOOK_BYTES) only when it grew, the run's metrics and the GPUs only once the
log has been quiet a while, and the stacks (py-spy) twice per quiet budget: once half-way,
once at its end. A job quiet for longer than its budget (``stall_timeout_min``, else
AIR_STALL_TIMEOUT_MIN; an open phase's ``expect_min`` when longer) is stalled: the stacks of
all its processes are taken (stacks.py) before anything is done, then ``on_stall`` decides:
``fail`` (the job's own failure, reason ``stalled``), ``retry`` (an infra retry), ``notify``
(it keeps running; its message says so), or by default an infra retry once when a rank waits
in a collective or rendezvous, else ``fail``. The longest quiet gap of each attempt is kept in
``progress.json`` (a study's ``stall: auto`` reads it).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.gpu.providers import provider
from air_skills.home import open_job_file, read_launch_env
from air_skills.runtime.execution import gang
from air_skills.runtime.supervision import stacks
from air_skills.runtime.supervision.own_steps import OwnSteps
from air_skills.runtime.supervision.stall_words import Stall, minutes, notify_message

NAME = "AIR_STALL_TIMEOUT_MIN"
PHASES = ("phases", "checkpoints/.air-phases")  # air_skills/job.py writes there
PROGRESS = "progress.json"
STACKS = "stacks.txt"
GPU_BUSY_PCT = 5.0  # a GPU of the job at least this busy is working
# CPU time is progress only above this share of one core (the job's processes summed, between
# the two stack samples of a quiet budget), and never while a stack shows a collective wait.
CPU_BUSY_CORES = 0.05  # blocked or sleeping: ~0.001; busy on a loaded machine: 0.2+
LOG_LOOK_BYTES = 65_536  # of a log that grew, its last bytes are read for new content
RECENT_LINES = 64  # the log's last distinct lines (and \r-redraws): printed again, no progress
_LINE_ENDS = re.compile(rb"[\r\n]+")
CHECK_MAX_S = 3.0  # the longest time between two reads of the signals


def timeout_s(spec: dict[str, Any], launched: dict[str, str] | None) -> float | None:
    """The job's stall budget in seconds: its spec's, else AIR_STALL_TIMEOUT_MIN as it was
    launched with (else this process's); None when off (0)."""
    minutes = spec.get("stall_timeout_min")
    if minutes is None:
        if launched and settings.raw(NAME, launched) and not settings.problem(NAME, launched):
            minutes = settings.get(NAME, launched)
        else:
            minutes = settings.get(NAME)
    return float(minutes) * 60 if minutes else None


class StallWatch:
    """One attempt's progress signals and stall clock (monotonic seconds)."""

    def __init__(
        self,
        jdir: Path,
        log_path: str,
        budget_s: float,
        *,
        metrics_db: Path | None = None,
        run_id: str | None = None,
        gpus: list[int] | None = None,
        now: float | None = None,
        started_wall: float | None = None,
    ) -> None:
        self.jdir = jdir
        self.log_path = log_path
        self.budget_s = budget_s
        self.metrics_db = metrics_db
        self.run_id = run_id
        self._own = OwnSteps(jdir, run_id) if run_id else None  # a relayed job's own store
        self.gpus = gpus or []
        self.started = time.monotonic() if now is None else now
        # When the attempt started (its record's started_at): a phase file older than this is
        # an earlier attempt's; one the command wrote before this supervisor booted is not.
        self.started_wall = time.time() if started_wall is None else started_wall
        self.last_progress = self.started
        self.max_gap_s = 0.0
        self.deep_every = min(10.0, max(0.5, budget_s / 6))
        self.next_deep = self.started + self.deep_every
        # The clock is read every few seconds, not at each of the supervisor's ticks: a stall is
        # still found within CHECK_MAX_S (+ a tick) of its budget, at a third of the cost.
        self.check_every = min(CHECK_MAX_S, max(0.0, budget_s / 20))
        self.next_check = self.started
        self.notified = False
        self._log_size = self._size(log_path)
        self._recent: OrderedDict[bytes, None] = OrderedDict()  # the log's last distinct lines
        self._remember_log_tail()
        # The half-way stack sample of this quiet stretch: (monotonic time, main frames per
        # pid, CPU ticks per pid); None until taken.
        self._mid: tuple[float, dict[int, list[Any]], dict[int, int]] | None = None
        self._phase_mtimes = self._phase_stamp()
        self._steps: dict[str, int] = {}
        self._db: sqlite3.Connection | None = None

    # --- the signals ------------------------------------------------------------------------

    @staticmethod
    def _size(path: str) -> int:
        try:
            return os.stat(path).st_size
        except OSError:
            return -1

    def _phase_stamp(self) -> tuple[float, ...]:
        out = []
        for sub in PHASES:
            try:
                out.append(os.stat(self.jdir / sub).st_mtime)
            except OSError:
                out.append(0.0)
        return tuple(out)

    def _remember_log_tail(self) -> None:
        """What the log already holds counts as seen: printed again, it is no progress."""
        if self._log_size > 0:
            self._new_content(max(0, self._log_size - LOG_LOOK_BYTES), self._log_size)

    def _new_content(self, start: int, end: int) -> bool:
        """Whether the log's bytes ``start:end`` (its last LOG_LOOK_BYTES at most) hold a line
        or a ``\\r``-redraw not among the last RECENT_LINES seen; those are remembered."""
        start = max(start, end - LOG_LOOK_BYTES)
        try:
            fd = open_job_file(self.log_path)  # never waits on a FIFO, never follows a link
        except OSError:
            return False
        try:
            data = os.pread(fd, end - start, start)
        finally:
            os.close(fd)
        new = False
        for part in _LINE_ENDS.split(data):
            line = part.strip()[:512]
            if not line:
                continue
            if line in self._recent:
                self._recent.move_to_end(line)
                continue
            new = True
            self._recent[line] = None
            if len(self._recent) > RECENT_LINES:
                self._recent.popitem(last=False)
        return new

    def _cheap(self) -> bool:
        """New log content (a stat; the new bytes read only when it grew), or else a phase
        opened or closed (two more stats)."""
        size = self._size(self.log_path)
        if size != self._log_size:
            before, self._log_size = self._log_size, size
            if size > before and self._new_content(max(before, 0), size):
                return True
        stamp = self._phase_stamp()
        moved = stamp != self._phase_mtimes
        self._phase_mtimes = stamp
        return moved

    def _metric_steps(self) -> bool:
        """A metric of the run reached a step it had not (or a new metric appeared)."""
        rows = list(self._own.steps().items()) if self._own is not None else []
        if self.metrics_db is not None and self.run_id:
            try:
                if self._db is None:
                    uri = f"file:{self.metrics_db}?mode=ro"
                    self._db = sqlite3.connect(uri, uri=True, timeout=0.2, check_same_thread=False)
                rows += self._db.execute(
                    "SELECT key, step FROM latest_metrics WHERE run_uuid = ?", (self.run_id,)
                ).fetchall()
            except sqlite3.Error:
                pass
        moved = False
        for key, step in rows:
            if step is not None and (key not in self._steps or step > self._steps[key]):
                moved = True
                self._steps[key] = step
        return moved

    def _gpu_busy(self) -> bool:
        if not self.gpus:
            return False
        try:
            readings = provider().readings(self.gpus)
        except Exception:  # a GPU read that fails is no evidence either way
            return False
        return any((getattr(r, "utilization_pct", None) or 0) >= GPU_BUSY_PCT for r in readings)

    def _progress(self, now: float, seen_at: float | None = None) -> None:
        """Progress seen at ``now`` (made at ``seen_at`` or later: the quiet gap ends there)."""
        gap_end = now if seen_at is None else seen_at
        self.max_gap_s = max(self.max_gap_s, gap_end - self.last_progress)
        self.last_progress = now
        self.next_deep = now + self.deep_every
        self.notified = False
        self._mid = None

    def _sample(self, pids: list[int]) -> tuple[list[stacks.ProcessStack], dict[int, int]]:
        """The processes' stacks and CPU ticks, now."""
        return stacks.dump(pids), stacks.cpu_ticks(pids)

    def _moved_between_samples(
        self, now: float, found: list[stacks.ProcessStack], ticks: dict[int, int]
    ) -> bool:
        """Since the half-way sample: a main-thread stack changed, or the processes used more
        than CPU_BUSY_CORES of a core with no stack in a collective or rendezvous wait."""
        if self._mid is None:
            return False
        then, frames, ticks_then = self._mid
        now_frames = stacks.main_frames(found)
        if any(pid in frames and frames[pid] != f for pid, f in now_frames.items()):
            return True
        if stacks.collective_wait(found):
            return False  # a spinning wait for a peer: its CPU time is no work
        used = sum(t - ticks_then.get(pid, 0) for pid, t in ticks.items())
        return used / stacks.CLOCK_TICKS >= CPU_BUSY_CORES * max(now - then, 1e-3)

    def open_phase(self) -> tuple[str, float] | None:
        """The open phase with the longest budget (name, seconds), from this attempt."""
        best: tuple[str, float] | None = None
        for sub in PHASES:
            folder = self.jdir / sub
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if not name.endswith(".json"):
                    continue
                try:
                    path = folder / name
                    if path.lstat().st_mtime < self.started_wall - 1:
                        continue  # left by an earlier attempt
                    record = json.loads(stacks.read_small(path) or "")
                    budget = float(record["expect_min"]) * 60
                    label = str(record.get("name", "phase"))[:80]
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if best is None or budget > best[1]:
                    best = (label, budget)
        return best

    # --- the tick ---------------------------------------------------------------------------

    def check(self, now: float, pids: Callable[[], list[int]]) -> Stall | None:
        """A Stall (with the stacks taken) once the job has been quiet past its budget."""
        if now < self.next_check:
            return None
        self.next_check = now + self.check_every
        moved = self._cheap()
        if not moved and now >= self.next_deep:
            self.next_deep = now + self.deep_every
            moved = self._metric_steps() or self._gpu_busy()
        if moved:
            self._progress(now)
            return None
        silent = now - self.last_progress
        if self.notified:
            return None
        if silent < self.budget_s:
            if silent >= self.budget_s / 2 and self._mid is None:  # the first stack sample
                found, ticks = self._sample(pids())
                self._mid = (now, stacks.main_frames(found), ticks)
            return None
        phase = self.open_phase()
        if phase is not None and silent < max(self.budget_s, phase[1]):
            return None
        if self._metric_steps() or self._gpu_busy():  # one last look before acting
            self._progress(now)
            return None
        found, ticks = self._sample(pids())
        if self._moved_between_samples(now, found, ticks):  # no half-way sample: no motion
            assert self._mid is not None
            self._progress(now, seen_at=self._mid[0])  # it moved since the half-way sample
            return None
        self.max_gap_s = max(self.max_gap_s, silent)
        return self._evidence(silent, phase[0] if phase else None, found)

    def _evidence(
        self, silent: float, phase: str | None, found: list[stacks.ProcessStack]
    ) -> Stall:
        line = stacks.summary(found)
        quiet = self._rank_quiet()
        headline = f"stalled {minutes(silent)} min (budget {minutes(self.budget_s)} min)"
        if quiet:
            headline += f"; last output: {quiet}"
        path = stacks.save(self.jdir / STACKS, found, f"{headline}\n{line}")
        return Stall(silent, self.budget_s, line, stacks.collective_wait(found), path, phase)

    def _rank_quiet(self) -> str:
        """``rank 0 12 s ago, rank 1 40 s ago`` from a gang's per-rank output files."""
        ages: dict[int, float] = {}
        root = gang.rank_log_dir(self.jdir)
        for folder, _, files in os.walk(root):
            rank = os.path.basename(folder)
            if not rank.isdigit():
                continue
            for name in files:
                try:
                    mtime = os.stat(os.path.join(folder, name)).st_mtime
                except OSError:
                    continue
                if mtime >= self.started_wall - 1:
                    ages[int(rank)] = min(ages.get(int(rank), 1e18), time.time() - mtime)
        return ", ".join(f"rank {r} {a:.0f} s ago" for r, a in sorted(ages.items()))

    # --- between processes (the Ray backend's watch lives from one reconcile to the next) ----

    _KEPT = ("started", "last_progress", "max_gap_s", "next_deep", "next_check", "notified")

    def state(self) -> dict[str, Any]:
        """What the watch knows, as JSON (its clock must be wall time: see ``watch(now=)``)."""
        kept = {k: getattr(self, k) for k in self._KEPT}
        mid = None
        if self._mid is not None:
            then, frames, ticks = self._mid
            mid = {"t": then, "frames": {str(p): f for p, f in frames.items()},
                   "ticks": {str(p): t for p, t in ticks.items()}}  # fmt: skip
        return {
            **kept,
            "log_size": self._log_size,
            "phases": self._phase_mtimes,
            "steps": self._steps,
            "recent": [line.decode("utf-8", "replace") for line in self._recent],
            "mid": mid,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (of ``state()``); a state that does not read is ignored whole."""
        try:
            kept = {k: type(getattr(self, k))(state[k]) for k in self._KEPT}
            size = int(state["log_size"])
            phases = tuple(float(t) for t in state["phases"])
            steps = {str(k): int(v) for k, v in state["steps"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            return
        for k, v in kept.items():
            setattr(self, k, v)
        self._log_size, self._phase_mtimes, self._steps = size, phases, steps
        try:  # newer keys: a state without them (or with them unreadable) still restores
            self._recent = OrderedDict((str(x).encode(), None) for x in state.get("recent", []))
            mid = state.get("mid")
            self._mid = None
            if mid:
                frames = {int(p): [list(x) for x in f] for p, f in mid["frames"].items()}
                ticks = {int(p): int(t) for p, t in mid["ticks"].items()}
                self._mid = (float(mid["t"]), frames, ticks)
        except (KeyError, TypeError, ValueError, AttributeError):
            self._mid = None

    def finish(self, now: float | None = None) -> None:
        """Keep the attempt's longest quiet gap in progress.json (for ``stall: auto``)."""
        now = time.monotonic() if now is None else now
        # The quiet stretch before the end counts too (a final save, an evaluation).
        gap = max(self.max_gap_s, now - self.last_progress)
        record = {"max_gap_s": round(gap, 3), "ran_s": round(now - self.started, 3)}
        stacks.write_new(self.jdir / PROGRESS, json.dumps(record))
        if self._db is not None:
            self._db.close()
            self._db = None


def watch(
    home: Path,
    jdir: Path,
    row: Any,
    spec: dict[str, Any],
    gpus: list[int],
    now: float | None = None,
) -> StallWatch | None:
    """The stall watch of a started attempt (None: stall detection is off for it); its clock
    starts at ``now`` (default: monotonic now)."""
    launched = read_launch_env(jdir)
    budget = timeout_s(spec, launched)
    if budget is None or not row.log_path:
        return None
    db = None
    if row.run_id:
        from air_skills.tracking.mlflow import tracking_uri
        from air_skills.tracking.sqlite_store import sqlite_path

        db = sqlite_path((launched or {}).get("MLFLOW_TRACKING_URI") or tracking_uri(home))
    return StallWatch(
        jdir,
        row.log_path,
        budget,
        metrics_db=db,
        run_id=row.run_id,
        gpus=gpus,
        now=now,
        started_wall=row.started_at,
    )


def tick(
    watch: StallWatch, store: Any, row: Any, spec: dict[str, Any], now: float, pids: Any
) -> Stall | None:
    """The watch's turn on the supervisor's tick: a Stall when the job is to be stopped.
    Under ``on_stall: notify`` the job keeps running and its message says it stalled (until
    it moves again)."""
    was_notified = watch.notified
    found = watch.check(now, pids)
    if was_notified and not watch.notified:  # it moved again
        store.set_message(row.job_id, "RUNNING: moving again after a stall")
    if found is None:
        return None
    if spec.get("on_stall") == "notify":
        watch.notified = True
        store.set_message(row.job_id, notify_message(found))
        store.event(row.job_id, "stalled", found.what())
        return None
    return found  # its outcome's event (failed, requeued-*) carries the stall, with the state
