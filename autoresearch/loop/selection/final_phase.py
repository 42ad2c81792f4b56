"""The loop's end: the final re-evaluation (``final.py`` says what), its runs launched and
watched, the held-out metric read (and flagged when a search trial logged it), reuse counted.

A mixin of ``StudyLoop``, like ``slots.SlotFilling``. Its plan is journaled (``final_started``,
then each run's ``proposal``) before anything runs, so a loop killed in the middle resumes it:
the runs proposed are launched once (their idempotency keys), none is proposed twice, and
``final_done`` is written once.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import AirError, NotFound
from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.loop.selection import final
from autoresearch.spec.study_schema import Study
from autoresearch.study.folder import take_stop_request

REUSE_FILE = "holdout_reads.json"  # in AIR_HOME: which studies each held-out split served


class FinalPhase:
    """The final re-evaluation; ``StudyLoop`` supplies the attributes below."""

    study: Study
    state: StudyState
    client: Any
    dir: Path
    log: Callable[[str], None]
    gpus_per_trial: int
    cancelling: dict[int, str]
    undecided: list[int]
    code: Any
    stop_why: str | None

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _launch(self, t: Trial) -> None:
        raise NotImplementedError

    def _active(self) -> list[Trial]:
        raise NotImplementedError

    def _poll(self, infos: dict[str, Any] | None = None) -> None:
        raise NotImplementedError

    def _decide(self) -> None:
        raise NotImplementedError

    def _cancel_active(self, why: str) -> None:
        raise NotImplementedError

    def _home(self) -> Path:
        raise NotImplementedError

    # --- the phase ---

    def _final_phase(self, reason: str) -> None:
        """Re-run the finalists and the baseline, then journal the winner and the gap."""
        settings_ = self.study.final_runs
        if settings_ is None or self.state.final_done is not None:
            return
        if any(c.get("stop") for c in getattr(self.state, "checks", ())):
            return  # the study stopped itself on a check (a failed baseline...): nothing to pick
        if self.state.final_started is None:
            numbers = final.finalists(self.study, self.state)
            if not numbers:
                self.emit("final_done", reason="no trial to re-evaluate", configs=[])
                return
            seeds = final.seeds(self.study)
            self.emit("final_started", reason=reason, finalists=numbers, seeds=seeds,
                      top_k=settings_.top_k)  # fmt: skip
            self.log(
                f"final re-evaluation: trials {', '.join(map(str, numbers))} and the baseline,"
                f" {len(seeds)} fresh seeds each"
            )
        self._propose_final()
        stopped = self._run_final()
        self._decide()
        summary = final.summary(self.study, self.state)
        if stopped:
            summary["reason"] = stopped
        self.emit("final_done", **summary)
        self.log(f"final selection: trial {summary.get('winner')}; {summary.get('verdict', '')}")

    def _propose_final(self) -> None:
        """Journal each planned run not proposed yet (all of them, unless a killed loop had
        proposed some): none twice."""
        started = self.state.final_started or {}
        key = self.study.noise.seed_key
        have = {(t.final_of, str(t.config.get(key))) for t in self.state.trials.values()
                if t.source == "final"}  # fmt: skip
        planned = final.plan(self.study, self.state, started.get("finalists", []),
                             started.get("seeds", []))  # fmt: skip
        for fields in planned:
            if (fields["final_of"], str(fields["config"].get(key))) not in have:
                self.emit("proposal", trial=self.state.next_number, **fields)

    def _run_final(self) -> str | None:
        """Launch the final runs as slots free up, until all have ended; a stop request that
        cancels running trials ends them (the reason), else None."""
        infos: dict[str, Any] = {}
        while True:
            self._poll(infos)
            self._decide()
            request = take_stop_request(self.dir)
            if request is not None:
                self.emit("stop_requested", **request)
                if request.get("cancel_running", True):
                    self._cancel_active("stop-request")
                    self._drain_final()
                    return "stop-request"
            pending = self._final_unlaunched()
            free = self.study.budget.concurrency - len(self._active())
            if self.gpus_per_trial > 0 and pending and free > 0:
                with contextlib.suppress(AirError):
                    idle = [g for g in self.client.gpus()
                            if g.health == "ok" and not g.cordoned and not g.job_ids]  # fmt: skip
                    fit = len(idle) // self.gpus_per_trial
                    free = min(free, fit if self._active() else max(fit, 1))
            for t in pending[: max(free, 0)]:
                self._launch(t)
            active = self._active()
            if not active and not self._final_unlaunched():
                return None
            if not active:
                continue
            try:
                got = self.client.wait([t.job_id for t in active], timeout_s=0.5, any=True)
                infos = {i.job_id: i for i in got}
            except NotFound:
                infos = {}

    def _drain_final(self) -> None:
        deadline = time.time() + 30
        while self._active() and time.time() < deadline:
            with contextlib.suppress(AirError):
                self.client.wait([t.job_id for t in self._active()], timeout_s=1.0, any=True)
            with contextlib.suppress(AirError):
                self._poll()

    def _final_unlaunched(self) -> list[Trial]:
        return [t for t in self.state.by_status(TrialStatus.PROPOSED) if t.source == "final"]

    def _check_holdout(self) -> None:
        """Held-out inputs the data roots refuse (AIR_DATA_ROOTS) raise now, before the search
        spends its budget, not when the final re-evaluation launches its first run."""
        if self.study.holdout_data and self.study.final_runs is not None:
            from air_skills.tracking.data import resolve_inputs

            resolve_inputs(self.study.holdout_data, self.study.workdir, deep=False)

    # --- the held-out metric ---

    def _holdout(self, t: Trial, fields: dict[str, Any]) -> None:
        """In the search: a trial that logged the held-out metric is flagged and the value
        dropped (no proposer may read it). In a final run: read it (the command, if any) and
        count the read."""
        holdout = self.study.objective.holdout
        if holdout is None:
            return
        metrics = fields.get("metrics") or {}
        if t.source != "final":
            if holdout.metric in metrics:
                fields["metrics"] = {k: v for k, v in metrics.items() if k != holdout.metric}
                self.emit("holdout_leak", trial=t.number, metric=holdout.metric)
                self.emit("warning", message=f"trial {t.number} logged the held-out metric"
                          f" {holdout.metric!r} during the search: flagged, its value dropped,"
                          " never a finalist")  # fmt: skip
            return
        if fields.get("status") != TrialStatus.SUCCEEDED.value:
            return
        if holdout.command:
            from autoresearch.loop.selection.holdout_eval import run_holdout

            got = run_holdout(self.study, self._home() / "jobs" / str(t.job_id), t.config,
                              self.dir / ".evaluate", self.code, self.dir)  # fmt: skip
            if got.problem:
                fields.update(status=TrialStatus.FAILED.value, failure_kind="evaluator",
                              failure=got.problem, value=None, log_tail=got.output)  # fmt: skip
                return
            fields["metrics"] = {**metrics, holdout.metric: got.metrics[holdout.metric]}
        elif holdout.metric not in metrics:  # the script ignores AIR_EVAL_SPLIT: say it once
            note = (
                f"final run {t.number} logged no held-out metric {holdout.metric!r}: the script"
                " must log it when AIR_EVAL_SPLIT is 'test' (or give objective.holdout.command)"
            )
            if not any("logged no held-out metric" in w for w in self.state.warnings):
                self.emit("warning", message=note)
            return
        studies = _count_reuse(self._home(), self.study, self.state.study_id)
        self.emit("holdout_read", trial=t.number, split="test", studies=studies)
        limit = settings.get("AIR_HOLDOUT_REUSE_WARN")
        note = (
            f"the held-out split has served {studies} studies (AIR_HOLDOUT_REUSE_WARN={limit}):"
            " choosing among studies by their held-out results overfits it too; keep a fresh"
            " split for the last word"
        )
        if limit and studies > limit and note not in self.state.warnings:
            self.emit("warning", message=note)


def split_key(study: Study) -> str:
    """What names a held-out split across studies: its data's real paths, else the metric and
    the command (a split built into the script)."""
    holdout = study.objective.holdout
    assert holdout is not None
    paths = sorted(os.path.realpath(os.path.join(study.workdir, d.path)) for d in holdout.data)
    if paths:
        return "data:" + "|".join(paths)
    return f"metric:{os.path.realpath(study.workdir)}:{holdout.metric}"


def _count_reuse(home: Path, study: Study, study_id: str | None) -> int:
    """Record that this study read the split; how many studies it has served."""
    path = home / REUSE_FILE
    key = split_key(study)
    try:
        seen = json.loads(path.read_text())
    except (OSError, ValueError):
        seen = {}
    if not isinstance(seen, dict):
        seen = {}
    studies = seen.get(key) if isinstance(seen.get(key), list) else []
    me = str(study_id or study.name)
    if me not in studies:
        studies = [*studies, me]
        seen[key] = studies
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(seen))
            os.replace(tmp, path)
    return len(studies)
