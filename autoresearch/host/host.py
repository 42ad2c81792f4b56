"""The study host: one process runs every study whose spec is in its folder, each in a thread
of its own driving an unchanged study loop (``HostedLoop``), with its own folder, journal and
budget, and all of them waiting through one shared waiter (waiter.py).

Why threads and not one event loop: a loop's steps block (an LLM call, a launch, the final
re-evaluation), and a thread per study keeps each study's code path the one that
``autoresearch run`` takes, so a hosted study resumes exactly as a single one does. A thread
that only waits costs a stack and the study's state, not an interpreter: a hundred studies
share one process's imports.

A study's crash ends that study alone: its error is journaled, its running trials are
cancelled and it is stopped with ``reason: error`` (``get_study`` says ``failed``); the others
go on. On SIGTERM or SIGINT the host ends every study's session as ``autoresearch run`` does on
its own (trials go on running) and exits; after a kill, even ``kill -9``, the next ``host run``
resumes each study that had not stopped from its journal: no trial is launched twice (the
journal and the launches' idempotency keys), and budgets count what was spent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills.errors import AirError
from autoresearch.host.waiter import HostedClient, SharedWaiter
from autoresearch.journal.journal import HEARTBEAT_S, Journal, replay
from autoresearch.loop.loop import IDLE_WAIT_S, StudyLoop
from autoresearch.study.folder import LOOP_LOG, loop_alive, write_private
from autoresearch.study.host_folder import (
    FAILED_SUFFIX,
    HOST_LOG,
    SPECS,
    HostLock,
    spec_files,
    study_dir_of,
)

HOST_WAIT_S = 30.0  # a hosted study's longest sleep when nothing happens (the waiter wakes it)
SCAN_S = 2.0  # how often the host looks at every spec (a changed file, a failure cleared)
NOTICE_S = 0.2  # how often it looks at specs/ itself: a spec added (host add, start_study)
STOP_JOIN_S = 20.0  # how long a stopping host waits for its studies to end their sessions


class HostStopping(KeyboardInterrupt):
    """The host is stopping: the study ends its session as an interrupted loop does."""


class HostedLoop(StudyLoop):
    """A study loop as ``autoresearch run`` has it, waiting through the host's waiter and
    ending its session when the host stops."""

    def __init__(
        self,
        study: Any,
        study_dir: Path,
        *,
        waiter: SharedWaiter,
        stopping: threading.Event,
        resume: bool,
        log: Callable[[str], None],
    ) -> None:
        # poll_s sets the turn's wait (the loop's max(poll_s, IDLE_WAIT_S)); _wait_cap cuts it
        super().__init__(study, study_dir, resume=resume, poll_s=HOST_WAIT_S, log=log)
        self.prune_every_s = IDLE_WAIT_S
        self._waiter = waiter
        self._stopping = stopping
        self._hosted: HostedClient | None = None

    @property
    def client(self) -> Any:
        if self._hosted is None:
            own = StudyLoop.client.fget(self)  # type: ignore[attr-defined]
            self._hosted = HostedClient(own, self._waiter, self.dir, self._wait_cap)
        return self._hosted

    def _wait_cap(self) -> float:
        """The longest this study may sleep now: until its next heartbeat, a prune pass every
        IDLE_WAIT_S while a trial runs under early stopping, the end of its wall-time budget."""
        now = time.time()
        # awake when a heartbeat is due: the journal's last line bounds the wall time a
        # kill -9 loses, as for a loop of its own
        cap = min(HOST_WAIT_S, max(0.05, self.journal.last_write + HEARTBEAT_S + 0.1 - now))
        if self.study.early_stopping.type != "none" and any(
            t.started_at is not None for t in self._active()
        ):
            cap = IDLE_WAIT_S
        wall = self.study.budget.wall_time_min
        if wall:
            left = wall * 60 - self.state.wall_s_now(now)
            cap = min(cap, max(0.05, left + 0.05))
        return cap

    def _check_stops(self) -> None:
        if self._stopping.is_set():
            raise HostStopping("the host is stopping")
        super()._check_stops()


class StudyHost:
    """Runs the studies of one host folder until SIGTERM/SIGINT (or ``stop()``)."""

    def __init__(self, host: Path, log: Callable[[str], None] | None = None) -> None:
        self.dir = Path(host)
        self.stopping = threading.Event()
        self._say = log or (lambda line: None)
        self.waiter = SharedWaiter(self.log)
        self.threads: dict[str, threading.Thread] = {}  # study name -> its thread
        self.outcome: dict[str, str] = {}  # study name -> how its thread ended
        self._known: dict[Path, float] = {}  # spec -> its mtime when looked at
        self._held: set[Path] = set()  # specs whose folder another process's loop holds
        self._spec_of: dict[str, Path] = {}  # study name -> the spec its thread runs
        self._lock = threading.Lock()

    def log(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError), open(self.dir / HOST_LOG, "a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")
        self._say(line)

    def stop(self) -> None:
        self.stopping.set()
        self.waiter.stop_all()

    def run(self) -> None:
        with HostLock(self.dir):
            previous = {}
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(ValueError):  # not the main thread: stop() instead
                    previous[sig] = signal.signal(sig, lambda *_: self.stop())
            from air_skills.tracking import writer

            if not writer.enabled():  # MLflow in this process: imported once, not by 100 threads
                import mlflow  # noqa: F401

            self.waiter.start()
            self.log(f"host {self.dir}: started")
            try:
                self.scan()
                ended = len(self.outcome) - len(self.threads)
                self.log(f"{len(self.outcome)} studies: {len(self.threads)} running, {ended} ended")
                seen, scanned = self._specs_mtime(), time.monotonic()
                while not self.stopping.wait(NOTICE_S):
                    # one stat a turn: a spec written into specs/ (always by a rename) changes
                    # the folder's mtime, so a new study starts within NOTICE_S, not SCAN_S
                    now = self._specs_mtime()
                    if now != seen or time.monotonic() - scanned >= SCAN_S:
                        seen, scanned = now, time.monotonic()
                        self.scan()
            finally:
                self.stop()
                deadline = time.monotonic() + STOP_JOIN_S
                for thread in list(self.threads.values()):
                    thread.join(timeout=max(0.0, deadline - time.monotonic()))
                self.waiter.close()
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                left = [n for n, t in self.threads.items() if t.is_alive()]
                self.log("host stopped" + (f" ({len(left)} studies still ending)" if left else ""))

    # --- the specs ---

    def _specs_mtime(self) -> int | None:
        try:
            return os.stat(self.dir / SPECS).st_mtime_ns
        except OSError:
            return None

    def scan(self) -> None:
        """Start the study of each spec not looked at yet (or changed while not running)."""
        for spec in spec_files(self.dir):
            try:
                mtime = spec.stat().st_mtime
            except OSError:
                continue
            if self._known.get(spec) == mtime:
                continue
            try:
                settled = self._consider(spec)
            except Exception as exc:  # an unreadable journal, a folder refused: that spec only
                self.log(f"{spec.name}: not started: {type(exc).__name__}: {str(exc)[:300]}")
                settled = True
            if settled:
                self._known[spec] = mtime

    def _consider(self, spec: Path) -> bool:
        """Start ``spec``'s study if it should run; whether the spec is settled for now (a
        study held by another process's loop is looked at again on the next scan)."""
        from autoresearch.study.study import check_runnable, load_study

        failed = spec.with_name(spec.stem + FAILED_SUFFIX)
        if failed.exists():
            return True  # it could not start; `host add` again after the fix
        try:
            study = check_runnable(load_study(spec))
        except AirError as exc:
            self._refused(spec, failed, exc)
            return True
        name = study.name
        with self._lock:
            running = self.threads.get(name)
            if running is not None and running.is_alive():
                if self._spec_of.get(name) == spec:
                    return False  # written again (start_study's rerun) as its thread ends
                self.log(f"[{name}] {spec.name}: a study of that name runs already; ignored")
                return True
        folder = study_dir_of(spec, study)
        events = Journal(folder).read()
        state = replay(events) if events else None
        if state is not None and state.stopped:
            self.outcome.setdefault(name, "stopped before this host started")
            return True  # finished or failed: it stays so (`autoresearch run DIR --resume`)
        alive = loop_alive(folder)
        if alive:
            if spec not in self._held:
                self._held.add(spec)
                self.log(f"[{name}] its folder is held by the loop of pid {alive.get('pid')}:"
                         " started once that loop ends, if the study has not stopped")  # fmt: skip
            return False
        thread = threading.Thread(
            target=self._run_study,
            args=(study, folder, bool(events), failed),
            name=f"study-{name}",
            daemon=True,
        )
        with self._lock:
            self.threads[name] = thread
            self._spec_of[name] = spec
            self.outcome[name] = "running"
        thread.start()
        self.log(f"[{name}] {'resumed' if events else 'started'} in {folder}")
        return True

    def _refused(self, spec: Path, failed: Path, exc: AirError) -> None:
        why = {"code": exc.code, "message": exc.message, "hint": exc.hint, "ts": time.time()}
        write_private(failed, json.dumps(why))
        self.log(f"{spec.name}: refused: {exc}")

    # --- one study ---

    def _run_study(self, study: Any, folder: Path, resume: bool, failed: Path) -> None:
        name = study.name
        loop_log = _LoopLog(folder / LOOP_LOG)
        loop: HostedLoop | None = None
        try:
            loop = HostedLoop(
                study, folder, waiter=self.waiter, stopping=self.stopping, resume=resume,
                log=loop_log,
            )  # fmt: skip
            result = loop.run()
            outcome = f"stopped: {result.stop_reason}"
        except KeyboardInterrupt:
            outcome = "interrupted: the next host run resumes it"
        except Exception as exc:  # this study fails (a bug in its path too); the others go on
            if isinstance(exc, AirError):
                code, outcome = exc.code, f"failed: {exc}"
            else:
                loop_log("".join(traceback.format_exception(exc)))
                code, outcome = "study-crashed", f"failed: {type(exc).__name__}: {exc}"
            if not Journal(folder).exists():  # refused before it began, or its folder is gone
                with contextlib.suppress(OSError):
                    write_private(failed, json.dumps({"code": code, "message": outcome[8:]}))
            elif loop is not None:
                self._fail(loop, None if isinstance(exc, AirError) else exc)
                if not any(e.get("event") == "launched" for e in Journal(folder).read()):
                    # refused before its first trial (a launch the sandbox or the data roots
                    # refuse): it could not start, as above; written once the study's folder
                    # is done with (start_study waits for it to take the study back)
                    why = {"code": code, "message": outcome[8:], "hint": ""}
                    if isinstance(exc, AirError):
                        why.update(message=exc.message, hint=exc.hint)
                    with contextlib.suppress(OSError):
                        write_private(failed, json.dumps(why))
        with self._lock:
            self.outcome[name] = outcome
        self.log(f"[{name}] {outcome}")

    def _fail(self, loop: HostedLoop, crash: BaseException | None) -> None:
        """End a study that raised: its error journaled (a crash's as ``study-crashed``), its
        running trials cancelled, and ``stopped`` with ``reason: error``: get_study says failed."""
        if not loop.journal.exists():
            return  # refused before it began: nothing of it to end
        with contextlib.suppress(Exception):
            loop.state = replay(loop.journal.read())
            if loop.state.stopped:
                return  # the loop ended it itself (an error every trial would meet)
            if crash is not None:
                loop.emit(
                    "error",
                    code="study-crashed",
                    message=f"{type(crash).__name__}: {str(crash)[:500]}",
                    hint=f"read {loop.dir / LOOP_LOG}; fix the cause, then resume it with"
                    f" `autoresearch run {loop.dir} --resume`",
                )
            loop._cancel_active("error")
            loop._drain(timeout_s=30)
        detail = (loop.state.last_error or {}).get("message") or "the study's loop failed"
        with contextlib.suppress(Exception):
            loop.emit("stopped", reason="error", detail=detail)
            loop.mirror.end_parent("FAILED")


class _LoopLog:
    """A hosted study's lines, appended to its folder's loop.log (as a background loop's)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")
