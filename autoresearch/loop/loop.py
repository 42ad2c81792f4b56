"""The autoresearch loop: fill every free slot with proposed trials, launch them through the
``Client``, stop the ones the median rule condemns, record everything, until a budget is spent.

The loop's state is its journal: every event is appended before the loop acts on it, and a
resumed loop replays the journal, re-attaches to trials still running, launches trials that
were proposed but not launched (their idempotency key makes a repeat launch a no-op) and goes
on. Nothing is held in memory that the journal does not also hold.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidSpec, InvalidState, NotFound
from air_skills.tracking import writer
from autoresearch.journal.journal import (
    HEARTBEAT_S,
    Journal,
    StudyState,
    TrialStatus,
    replay,
)
from autoresearch.loop import budgets, waste
from autoresearch.loop.launcher import TrialLauncher
from autoresearch.loop.mirror import StudyMirror
from autoresearch.loop.prior import with_base_job
from autoresearch.loop.selection.final_phase import FinalPhase
from autoresearch.loop.slots import SlotFilling
from autoresearch.loop.trials import build_request, trial_command
from autoresearch.loop.watch import STUDY_ENDING, TrialWatch
from autoresearch.proposers import Proposer, make_proposer
from autoresearch.report.summary import budget_warning
from autoresearch.study.folder import (
    LOOP_LOG,
    STOP_FILE,
    STUDY_FILE,
    LoopLock,
    fill_env,
    hidden_copy,
    hide_env,
    save_env,
    take_stop_request,
    write_private,
)
from autoresearch.study.registry import register
from autoresearch.study.study import Study, dump_study, parse_study

IDLE_WAIT_S = 2.0  # the longest wait for running trials between two turns of the loop
# Keys that define what a study measures; a resume may change budgets, never these.
FIXED_ON_RESUME = (
    "name",
    "command",
    "base_config",
    "search_space",
    "objective",
    "noise",
    "code",
    "evaluate",
)


@dataclass
class LoopResult:
    study_dir: Path
    stop_reason: str
    state: StudyState


class StudyLoop(TrialLauncher, TrialWatch, SlotFilling, FinalPhase):
    """Runs one study in one folder. ``run()`` returns when a budget is spent or a stop is
    requested; it raises on a study that cannot go on (a bad metric, a refused API key)."""

    def __init__(
        self,
        study: Study,
        study_dir: Path,
        *,
        client: Any = None,
        proposer: Proposer | None = None,
        resume: bool = False,
        poll_s: float = 0.25,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.study = study
        self.dir = Path(study_dir).resolve()
        self.journal = Journal(self.dir)
        self._client = client
        self._proposer = proposer
        self.resume = resume
        self.poll_s = poll_s
        self.log = log or (lambda line: None)
        self.state = StudyState()
        self.gpus_per_trial = 0
        self.soft_stop: str | None = None
        self.hard_stop: str | None = None
        self.cancelling: dict[int, str] = {}
        self.undecided: list[int] = []
        self.metric_seen = False
        self.curve_warned = False
        self.stop_why: str | None = None  # the reason a stop request gave
        self.mirror = StudyMirror(self.emit, self._tracker, lambda: self.state.parent_run_id)
        self.prune_every_s = max(poll_s, 2.0)

    # --- journal ---

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = self.journal.append(kind, **fields)
        self.state.apply(record)
        return record

    @property
    def client(self) -> Any:
        if self._client is None:
            from air_skills.client import Client

            self._client = Client()
            self._client.runtime.keep_spares = True  # long-lived: claims spare MLflow runs
            if writer.enabled():  # MLflow stays out of the loop: a trial's run, if no spare
                self._client.runtime.make_runs_here = False  # is there, is its supervisor's
        return self._client

    def _tracker(self) -> Any:
        """The mirror's MLflow: the home's tracking writer (tracking/writer.py), or MLflow
        in this process when AIR_TRACKING_WRITER is off."""
        return writer.tracker_for(self.client.home, self.client.tracker.uri)

    # --- the run ---

    def run(self) -> LoopResult:
        if self._proposer is None:  # a missing API key fails before anything is written
            self._proposer = make_proposer(self.study.proposer)
        made = not self.resume and not self.dir.exists()  # this call makes the folder
        try:
            return self._run()
        except AirError:
            # A start refused before any trial ran (the sandbox, the data roots, a missing
            # held-out input) takes back the folder it made, so the fixed rerun is not
            # refused as "already holds a journal"; a folder that was there is never touched.
            if made and not any(e.get("event") == "launched" for e in self.journal.read()):
                shutil.rmtree(self.dir, ignore_errors=True)
                self.log(f"nothing ran: study folder {self.dir} removed again")
            raise

    def _run(self) -> LoopResult:
        with LoopLock(self.dir):
            register(self.study.name, self.dir)  # get_study(name) finds it (CLI runs too)
            self._start()
            previous = signal.getsignal(signal.SIGTERM)
            with contextlib.suppress(ValueError):  # not the main thread: no handler
                signal.signal(signal.SIGTERM, _raise_interrupt)
            try:
                started = self.state.final_started  # killed in the final re-evaluation
                reason = started.get("reason", "done") if started else self._loop()
                self.mirror.settle(wait=True)  # the parent run, made beside the first trials
                self._final_phase(reason)
            except KeyboardInterrupt:
                self.emit("session_ended", reason="interrupted")
                self.log("interrupted: trials still running go on; resume with --resume")
                raise
            except STUDY_ENDING as exc:
                # every trial of this study would end the same way: stop them all now
                self.emit("error", code=exc.code, message=exc.message, hint=exc.hint)
                self.log(str(exc))
                self._cancel_active("error")
                self._drain(timeout_s=30)
                self.emit("stopped", reason="error", detail=exc.message)
                self.mirror.end_parent("FAILED")
                self._report()
                raise
            except AirError as exc:
                # a refused API key, a store that went away: trials still running go on, and
                # `--resume` re-attaches to them once the cause is fixed
                self.emit("error", code=exc.code, message=exc.message, hint=exc.hint)
                self.emit("session_ended", reason="error")
                self.log(str(exc))
                raise
            finally:
                with contextlib.suppress(ValueError):
                    signal.signal(signal.SIGTERM, previous)
            detail = {"detail": self.stop_why} if self.stop_why else {}
            self.emit("stopped", reason=reason, **budgets.spent(self.state, time.time()), **detail)
            self.mirror.end_parent("FINISHED")
            self._report()
            self.log(f"stopped: {reason}")
            return LoopResult(self.dir, reason, self.state)

    def _start(self) -> None:
        # env values: from env.json when the study is a saved one; kept there, named elsewhere
        self.study = fill_env(self.study, self.dir)
        self.study = with_base_job(self.study, self.client)  # its config under base_config
        save_env(self.dir, self.study.env)
        events = self.journal.read()
        if events and not self.resume:
            raise InvalidState(
                f"study folder {self.dir} already holds a journal ({len(events)} events)",
                hint=f"continue it with `autoresearch run {self.dir} --resume`, or give the"
                " study another name or folder",
                study_dir=str(self.dir),
            )
        self.state = replay(events)
        if self.state.study:
            self._check_resumable(self.state.study)
        proposer = self._proposer
        assert proposer is not None
        stale = self.dir / STOP_FILE
        with contextlib.suppress(OSError):
            stale.unlink()
        if self.state.gpus_per_trial is not None:
            self.gpus_per_trial = self.state.gpus_per_trial
        elif self.study.gpus_per_trial is not None:
            self.gpus_per_trial = self.study.gpus_per_trial
        else:
            self.gpus_per_trial = 1 if self.client.gpus() else 0
        write_private(self.dir / STUDY_FILE, dump_study(hidden_copy(self.study)))
        self.emit(
            "session_started",
            study=hide_env(self.study.to_dict()),
            study_id=self.state.study_id or uuid.uuid4().hex[:12],
            pid=os.getpid(),
            resume=bool(events),
            gpus_per_trial=self.gpus_per_trial,
            proposer=proposer.name,
            air_home=str(getattr(self.client, "home", "")),
        )
        unavailable = getattr(self._proposer, "unavailable", None)  # its fallback proposes
        for warning in ([unavailable] if unavailable else []) + (
            [*self.study.notes, *budget_warning(self.study)] if not events else []
        ):
            self.emit("warning", message=warning)  # before the first trial: it can still be fixed
            self.log(f"warning: {warning}")
        self._start_code()
        self._check_holdout()  # its data is read only at the end: refused now, not then
        self.metric_seen = any(
            self.study.objective.metric in t.metrics for t in self.state.trials.values()
        )
        if self.state.parent_run_id is None:
            self.mirror.create_parent(self.study, self.state.study_id, self.dir)
        else:
            self.mirror.resume_parent()
        self._pick_up()
        active = len(self._active())
        self.log(
            f"study {self.study.name}: {self.dir}"
            + (f" (resumed: {len(self.state.trials)} trials, {active} running)" if events else "")
        )

    def _pick_up(self) -> None:
        """Carry on from where a killed loop stopped, whatever line it wrote last: judge the
        finished trials, stop the pruned ones still running, relaunch an infra failure."""
        self.undecided = [
            t.number for t in self.state.ordered() if t.status.is_final() and t.decision is None
        ]
        for t in self.state.ordered():
            if t.status == TrialStatus.PRUNED and not t.job_done:
                self.cancelling[t.number] = "pruned"
                self._cancel(t, "pruned by the median rule")  # the kill may have beaten it
            elif t.status == TrialStatus.RUNNING and t.job_done:
                # Its `infra_retry` is journaled and its relaunch is not; the key of the next
                # attempt makes this a no-op if the launch itself had happened.
                self.log(f"trial {t.number}: relaunching after an infra failure")
                self._launch(t)

    def _check_resumable(self, saved: dict[str, Any]) -> None:
        saved, current = hide_env(saved), hide_env(self.study.to_dict())
        changed = [k for k in FIXED_ON_RESUME if saved.get(k) != current.get(k)]
        if changed:
            raise InvalidSpec(
                "the study file differs from the journal's study in keys a resume cannot change:",
                problems=[f"{k}: changed since the study started" for k in changed],
                hint="restore those keys (the journal's copy is in study.yaml) or start a new"
                " study under another name; budgets, proposer and notes may change",
            )
        if saved != current:
            self.emit("study_updated", study=current)

    def _loop(self) -> str:
        heartbeat = last_prune = time.time()
        infos: dict[str, Any] = {}
        while True:
            self._poll(infos)
            self._check_waste()
            self._decide()
            self._steer()
            self._check_stops()
            if self.hard_stop:
                self._cancel_active(self.hard_stop)
            elif not self.soft_stop:
                self._fill()
            self.mirror.flush()  # after the launches: slow MLflow writes never delay a trial
            active = self._active()
            if not active:
                if self.hard_stop or self.soft_stop:
                    self._decide()
                    self.mirror.flush()
                    return self.hard_stop or self.soft_stop or "done"
                if self.refused:  # a trial failed before launch: its slot is free again
                    self.refused = 0
                    continue
                self.soft_stop = "nothing left to launch"
                continue
            now = time.time()
            if now - last_prune >= self.prune_every_s:
                self._prune_pass(infos)
                last_prune = now
            if now - max(heartbeat, self.journal.last_write) > HEARTBEAT_S:
                self.emit("heartbeat", running=len(active))
                heartbeat = now
            try:
                # One wait of up to IDLE_WAIT_S (it returns as soon as a trial ends or stalls):
                # its polls back off, where a new wait every poll_s polled ~25 times a second
                # (2% of a core for a loop that only waits).
                got = self.client.wait(
                    [t.job_id for t in active], timeout_s=max(self.poll_s, IDLE_WAIT_S), any=True
                )
                infos = {i.job_id: i for i in got}
            except NotFound:
                infos = {}

    # --- the study's checks of its own results (waste.py) ---

    def _check_waste(self) -> None:
        """Say each finding once (terminal, journal; get_study and the page read it there);
        one that is certain stops the study: no more budget on it."""
        seen = {c["code"]: bool(c.get("stop")) for c in self.state.checks}
        for found in waste.findings(self.study, self.state):
            if found.code in seen and (seen[found.code] or not found.stop):
                continue  # said already (a stop is said once more, when it comes)
            self.emit("check", **found.fields())
            self.log(f"check [{found.code}]: {found.message}\n  Fix: {found.fix}")
            if found.stop and not self.hard_stop:
                self.hard_stop = found.code
                self.stop_why = found.message

    # --- budgets and stops ---

    def _steer(self) -> None:
        """Journal the steering requests left for this loop (steer_study), then hold the
        study to the budget they set (again after a resume: the journal has them)."""
        from autoresearch.study.steer_requests import take_steer_requests

        for request in take_steer_requests(self.dir):
            self.emit("steer", **request)
            self.log(self.state.steering.line(request))
        changed = self.state.steering.budget
        if changed and any(getattr(self.study.budget, k) != v for k, v in changed.items()):
            budget = self.study.budget.model_copy(update=changed)
            self.study = self.study.model_copy(update={"budget": budget})
            if self.soft_stop and self.soft_stop.startswith("budget:"):
                self.soft_stop = None  # a raised budget: the search goes on

    def _check_stops(self) -> None:
        request = take_stop_request(self.dir)
        if request is not None:
            why = request.get("reason") or "stop requested"
            self.stop_why = why
            self.emit("stop_requested", **request)
            if request.get("cancel_running", True):
                self.hard_stop = "stop-request"
            else:
                self.soft_stop = "stop-request"
            self.log(f"stop requested: {why}")
        hard, soft = budgets.budget_stop(
            self.study,
            self.state,
            time.time(),
            unlaunched=len(self._unlaunched()),
            gpus_per_trial=self.gpus_per_trial,
            stopping=bool(self.hard_stop or self.soft_stop),
        )
        self.hard_stop = self.hard_stop or hard
        self.soft_stop = self.soft_stop or soft

    # --- the end ---

    def _report(self) -> None:
        try:
            from autoresearch.report.report import write_report

            paths = write_report(self.dir)
            self.log(f"report: {paths['report']}")
            self.mirror.report(paths["report"])
        except Exception as exc:
            self.emit("warning", message=f"report failed: {str(exc)[:200]}")


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_study(
    study: Study | dict[str, Any] | str | Path,
    study_dir: Path | str | None = None,
    *,
    resume: bool = False,
    client: Any = None,
    proposer: Proposer | None = None,
    poll_s: float = 0.25,
    log: Callable[[str], None] | None = None,
) -> LoopResult:
    """Run a study to the end of its budget (or resume it); blocking."""
    from autoresearch.study.study import check_runnable, default_study_dir, load_study

    if not isinstance(study, Study):
        source = study
        study = load_study(source)
        if study_dir is None and isinstance(source, str | Path) and Path(source).is_dir():
            study_dir = Path(source)
    if study_dir is None:
        study_dir = default_study_dir(study)
    study = check_runnable(study)
    loop = StudyLoop(
        study,
        Path(study_dir),
        client=client,
        proposer=proposer,
        resume=resume,
        poll_s=poll_s,
        log=log,
    )
    return loop.run()


__all__ = [
    "LOOP_LOG",
    "LoopResult",
    "StudyLoop",
    "build_request",
    "parse_study",
    "run_study",
    "trial_command",
]
