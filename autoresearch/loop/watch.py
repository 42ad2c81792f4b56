"""The loop's watching half: record the trials whose jobs ended, judge them, prune, cancel.

A mixin of ``StudyLoop``: it reads and writes the loop's state, and journals through its
``emit``, so that one object holds what the journal holds.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

from air_skills.errors import (
    AirError,
    InvalidState,
    NotFound,
    TrackingUnavailable,
    UnknownMetric,
)
from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.loop import decisions
from autoresearch.loop.mirror import StudyMirror
from autoresearch.loop.outcomes import (
    job_times,
    missing_metric_error,
    trial_outcome,
    ts,
    wants_infra_retry,
)
from autoresearch.loop.selection import confirm
from autoresearch.spec.study_schema import Study

LOG_TAIL_LINES = 20
# Errors that every trial of the study would meet too: the loop stops the whole study.
STUDY_ENDING = (UnknownMetric, TrackingUnavailable)


class TrialWatch:
    """Watching the study's running trials; ``StudyLoop`` supplies the attributes below."""

    study: Study
    state: StudyState
    mirror: StudyMirror
    client: Any
    log: Callable[[str], None]
    cancelling: dict[int, str]  # trial -> why the loop is stopping it
    undecided: list[int]  # finished trials not judged yet, in finish order
    hard_stop: str | None
    metric_seen: bool
    curve_warned: bool
    _holdout: Callable[[Trial, dict[str, Any]], None]  # final_phase.FinalPhase's

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _launch(self, t: Trial) -> None:
        raise NotImplementedError

    def _tamper_after(self, t: Trial) -> list[str]:
        raise NotImplementedError

    def _evaluate(self, t: Trial, fields: dict[str, Any]) -> None:
        raise NotImplementedError

    def _active(self) -> list[Trial]:
        """Trials whose job has not ended (a pruned trial's job may still be stopping)."""
        return [t for t in self.state.ordered() if t.job_id and not t.job_done]

    def _poll(self, infos: dict[str, Any] | None = None) -> None:
        """Record trials whose job has ended; ``infos`` are fresh JobInfos (from ``wait``)."""
        for t in self._active():
            assert t.job_id is not None
            info = (infos or {}).get(t.job_id)
            if info is None:
                try:
                    info = self.client.get(t.job_id)
                except NotFound:
                    self.emit(
                        "finished",
                        trial=t.number,
                        status=TrialStatus.FAILED.value,
                        failure=f"job {t.job_id} is gone from AIR_HOME",
                        failure_kind="infra",
                    )
                    self.undecided.append(t.number)
                    continue
            if t.started_at is None and info.started_at is not None:
                self.emit("job_started", trial=t.number, started_at=ts(info.started_at))
            if info.status.is_terminal():
                self._finished(t, info)

    def _prune_pass(self, infos: dict[str, Any]) -> None:
        if self.study.early_stopping.type == "none" or self.hard_stop:
            return
        for t in self._active():
            info = infos.get(t.job_id or "")
            job_status = None if info is None else str(info.status)
            if decisions.may_be_pruned(t, job_status, t.number in self.cancelling):
                self._maybe_prune(t)

    def _curve(self, job_id: str, metric: str) -> list[list[float]]:
        try:
            m = self.client.metrics(job_id, keys=[metric], history=True, max_points=200)
        except AirError:  # UnknownMetric and NotFound too: no curve yet
            return []
        return [[float(s), float(v)] for s, v in m.history.get(metric, [])]

    def _maybe_prune(self, t: Trial) -> None:
        t.curve = self._curve(t.job_id or "", self.study.objective.curve_metric)
        verdict = decisions.prune_verdict(t, self.study, self.state)
        if verdict is None:
            return
        self.emit(
            "pruned",
            trial=t.number,
            job_id=t.job_id,
            step=verdict.step,
            value=verdict.value,
            median=verdict.median,
            reason=verdict.reason,
            curve=t.curve,
        )
        self.cancelling[t.number] = "pruned"
        self.log(f"trial {t.number} pruned: {verdict.reason}")
        self._cancel(t, f"pruned by the median rule: {verdict.reason}")

    def _cancel(self, t: Trial, reason: str) -> None:
        try:
            self.client.cancel(t.job_id, reason=reason, wait_s=0)
        except TypeError:  # a client without wait_s
            self.client.cancel(t.job_id, reason=reason)
        except (InvalidState, NotFound):
            pass  # it ended (or went) meanwhile; the next poll records how

    def _cancel_active(self, why: str) -> None:
        for t in self._active():
            if t.number in self.cancelling:
                continue
            self.cancelling[t.number] = why
            self.log(f"trial {t.number} cancelled: {why}")
            self._cancel(t, f"autoresearch stopped the study: {why}")

    def _drain(self, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        while self._active() and time.time() < deadline:
            with contextlib.suppress(AirError):
                self.client.wait([t.job_id for t in self._active()], timeout_s=1.0, any=True)
            with contextlib.suppress(AirError):
                self._poll()

    def _finished(self, t: Trial, info: Any) -> None:
        tampered = self._tamper_after(t)
        if tampered:  # its result never counts, whatever it reported
            _, _, gpu_s = job_times(info)
            self.cancelling.pop(t.number, None)
            self.emit("finished", trial=t.number, job_id=t.job_id, run_id=info.run_id,
                      status=TrialStatus.FAILED.value, failure_kind="tampered", gpu_s=gpu_s,
                      failure="tampered: changed protected " + ", ".join(tampered))  # fmt: skip
            self.undecided.append(t.number)
            self.log(f"trial {t.number} TAMPERED with {', '.join(tampered)}: not counted")
            return
        stopping = bool(self.hard_stop) or t.number in self.cancelling
        if wants_infra_retry(t, info, self.study.max_infra_retries, stopping):
            _, _, gpu_s = job_times(info)
            self.emit(
                "infra_retry", trial=t.number, job_id=t.job_id, message=info.message, gpu_s=gpu_s
            )
            self.log(f"trial {t.number}: infra failure ({info.message}); relaunching")
            self._launch(t)
            return
        objective = self.study.objective
        latest, untracked, down = self._latest_metrics(t, info)
        outcome = trial_outcome(
            t,
            info,
            metric=objective.metric,
            step_metric=objective.step_metric,
            latest=latest,
            curve=self._curve(t.job_id or "", objective.curve_metric) if latest else [],
            cancel_reason=self.cancelling.pop(t.number, None),
            log_tail=lambda: self._log_tail(t),
        )
        fields = outcome.fields
        if untracked is not None and outcome.logged is not None:
            # It succeeded, but its metrics cannot be read: tracking's fault, not the metric's.
            fields.update(status=TrialStatus.FAILED.value, failure_kind="infra", failure=untracked)
            self.emit("finished", **fields)
            self.undecided.append(t.number)
            self.log(f"trial {t.number} FAILED ({untracked})")
            if down is not None:
                raise TrackingUnavailable(
                    f"tracking is unavailable, so trial {t.number}'s metrics cannot be read:"
                    f" {down.message}",
                    hint=f"{down.hint}; then continue the study with --resume"
                    if down.hint
                    else "fix the tracking store, then continue the study with --resume",
                    job_id=t.job_id,
                )
            return
        if outcome.logged is not None:
            self.emit("finished", **fields)
            self.undecided.append(t.number)
            if not self.metric_seen:
                raise missing_metric_error(objective.metric, t, outcome.logged)
            return
        self.metric_seen = self.metric_seen or outcome.metric_seen
        if fields.get("status") == TrialStatus.SUCCEEDED.value and self.study.evaluate:
            self._evaluate(t, fields)
        self._holdout(t, fields)  # the held-out metric: flagged in the search, read at the end
        if outcome.no_curve and not self.curve_warned:
            self.curve_warned = True
            self.emit(
                "warning",
                message=f"step_metric {objective.step_metric!r} has no history in trial"
                f" {t.number}: early stopping cannot judge its curve; it logged "
                + ", ".join(sorted(latest)),
            )
        self.emit("finished", **fields)
        self.undecided.append(t.number)
        shown = fields.get("value")
        self.log(
            f"trial {t.number} {fields['status']}"
            + (f": {objective.metric}={shown:.5g}" if isinstance(shown, float) else "")
            + (f" ({fields['failure']})" if fields.get("failure") else "")
        )

    def _latest_metrics(
        self, t: Trial, info: Any
    ) -> tuple[dict[str, float], str | None, TrackingUnavailable | None]:
        """(the run's last metric values, why a trial that succeeded has none to read, the
        tracking error now). Tracking that is down must not read as "it logged nothing"."""
        succeeded = str(info.status) == "SUCCEEDED"
        if info.run_id:
            try:
                return dict(self.client.metrics(t.job_id).latest), None, None
            except TrackingUnavailable as exc:
                if not succeeded:
                    self.mirror.warn_once(f"cannot read metrics: {exc.message}")
                    return {}, None, None
                return {}, f"its metrics cannot be read: {exc.message}", exc
            except AirError as exc:
                self.mirror.warn_once(f"cannot read metrics: {exc.message}")
                return {}, None, None
        if not succeeded:
            return {}, None, None
        try:
            _ = self.client.tracker.client  # opens the store: the error names it
        except TrackingUnavailable as exc:
            return {}, f"it ran without an MLflow run: {exc.message}", exc
        # Tracking works now; it did not when the trial was launched.
        return {}, "it ran without an MLflow run: tracking was unavailable at its launch", None

    def _log_tail(self, t: Trial) -> str:
        with contextlib.suppress(AirError):
            return self.client.logs(t.job_id, tail=LOG_TAIL_LINES).text
        return ""

    # --- decisions ---

    def _decide(self) -> None:
        """Record keep/discard for finished trials, in finish order, once the noise floor is
        known (a trial is kept only when it beats the best by more than the floor)."""
        study = self.study
        floor = decisions.noise_floor_fields(study, self.state)
        if floor is not None and not floor["values"]:  # never "noise floor: 0" from no run
            self.emit("noise_floor", **floor)  # judging may go on; nothing reads it as a floor
            self.emit("warning", message="no run of the base config succeeded: no noise floor")
            self.log("noise floor: none (no run of the base config succeeded)")
        elif floor is not None:
            self.emit("noise_floor", **floor)
            self.log(
                f"noise floor: {floor['floor']:.4g} ({study.noise.sigmas:g} x std"
                f" {floor['std']:.4g})"
            )
            if len(floor["values"]) < 2:
                self.emit(
                    "warning",
                    message=f"only {len(floor['values'])} baseline run(s) succeeded: noise floor 0",
                )
        floor_known = study.noise.repeats == 0 or self.state.noise_floor is not None
        self.undecided, floor_known = decisions.judging_order(
            self.state, self.undecided, floor_known
        )
        while self.undecided:
            t = self.state.trials[self.undecided[0]]
            decision = decisions.decide_trial(t, study, self.state, floor_known)
            if decision is not None and decision.decision == "keep":
                decision = self._confirmed(t, decision)
            if decision is None:
                return
            self._decision(t, decision)
            if decision.decision == "keep":
                self.log(f"trial {t.number} is the new best: {t.value:.5g}")
            self.undecided.pop(0)

    def _confirmed(self, t: Trial, screen: decisions.Decision) -> decisions.Decision | None:
        """A keep that must be confirmed first: its re-runs proposed, then the paired verdict
        (None while they run). With no trial budget left for them it stands unconfirmed."""
        if not confirm.needed(t, self.study, self.state):
            return screen
        if not confirm.confirmations(self.state, t.number):
            planned = confirm.runs(t, self.study)
            if self.state.search_trials + len(planned) > self.study.budget.trials:
                self.emit("warning", message=f"trial {t.number} kept unconfirmed: no trial"
                          " budget left for its confirmation runs")  # fmt: skip
                return screen
            for config, why in planned:
                self.emit("proposal", trial=self.state.next_number, source="confirm",
                          diff=t.diff, config=config, rationale=why, confirms=t.number,
                          patch=t.patch, parent=t.parent)  # fmt: skip
            self.log(f"trial {t.number} beats the best: confirming with {len(planned)} seeds")
            return None
        found = confirm.verdict(t, self.study, self.state)
        if found is None:
            return None
        verdict, stats = found
        if verdict == confirm.SEED_IGNORED:  # a fixed seed: said, never kept
            self.emit("warning", message=f"trial {t.number} not kept: {stats['reason']}")
        best = (t.number, stats["mean"]) if verdict == "keep" else None
        return decisions.Decision(t.number, verdict, best=best, confirmed=stats, rule=stats["rule"])

    def _decision(self, t: Trial, decision: decisions.Decision) -> None:
        best = decision.best
        best_trial, best_value = best if best else (self.state.best_trial, self.state.best_value)
        self.emit(
            "decision",
            trial=t.number,
            decision=decision.decision,
            value=t.value,
            best_trial=best_trial,
            best_value=best_value,
            floor=self.state.noise_floor,
            **({"confirmed": decision.confirmed} if decision.confirmed else {}),
            **({"rule": decision.rule} if decision.rule else {}),
        )
        finite = t.value is not None and math.isfinite(t.value)
        self.mirror.decision(
            t.number,
            t.value if finite else None,
            best_value if best is not None else None,
            run_id=t.run_id,
        )
