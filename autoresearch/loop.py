"""The autoresearch loop: fill every free slot with proposed trials, launch them through the
``Client``, stop the ones the median rule condemns, record everything, until a budget is spent.

The loop's state is its journal: every event is appended before the loop acts on it, and a
resumed loop replays the journal, re-attaches to trials still running, launches trials that
were proposed but not launched (their idempotency key makes a repeat launch a no-op) and goes
on. Nothing is held in memory that the journal does not also hold.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidSpec, InvalidState, NotFound, UnknownMetric
from autoresearch.early_stopping import median_rule
from autoresearch.folder import LOOP_LOG, STOP_FILE, STUDY_FILE, LoopLock, take_stop_request
from autoresearch.journal import Journal, StudyState, Trial, TrialStatus, noise_stats, replay
from autoresearch.proposers import ProposalRequest, Proposer, make_proposer, suggest
from autoresearch.study import Study, dump_study, parse_study

# Keys that define what a study measures; a resume may change budgets, never these.
FIXED_ON_RESUME = ("name", "command", "base_config", "search_space", "objective", "noise")
LOG_TAIL_LINES = 20


@dataclass
class LoopResult:
    study_dir: Path
    stop_reason: str
    state: StudyState


def _ts(value: Any) -> float | None:
    if value is None:
        return None
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def failure_reason(log_text: str, fallback: str) -> str:
    """The line of a log tail that says why: the last exception-like line, else the last one."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "Exception" in ln or ln.startswith(("error", "fatal", "Killed")):
            return ln[:300]
    return (lines[-1] if lines else fallback)[:300]


class StudyLoop:
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
        self.tracking_warned = False
        self.mirror_queue: list[Callable[[Any], Any]] = []
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
        return self._client

    # --- the run ---

    def run(self) -> LoopResult:
        if self._proposer is None:  # a missing API key fails before anything is written
            self._proposer = make_proposer(self.study.proposer)
        with LoopLock(self.dir):
            self._start()
            previous = signal.getsignal(signal.SIGTERM)
            with contextlib.suppress(ValueError):  # not the main thread: no handler
                signal.signal(signal.SIGTERM, _raise_interrupt)
            try:
                reason = self._loop()
            except KeyboardInterrupt:
                self.emit("session_ended", reason="interrupted")
                self.log("interrupted: trials still running go on; resume with --resume")
                raise
            except UnknownMetric as exc:
                # every trial of this study would end the same way: stop them all now
                self.emit("error", code=exc.code, message=exc.message, hint=exc.hint)
                self.log(str(exc))
                self._cancel_active("error")
                self._drain(timeout_s=30)
                self.emit("stopped", reason="error", detail=exc.message)
                self._end_parent("FAILED")
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
            self.emit("stopped", reason=reason, **self._stop_detail())
            self._end_parent("FINISHED")
            self._report()
            self.log(f"stopped: {reason}")
            return LoopResult(self.dir, reason, self.state)

    def _start(self) -> None:
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
        (self.dir / STUDY_FILE).write_text(dump_study(self.study))
        self.emit(
            "session_started",
            study=self.study.to_dict(),
            study_id=self.state.study_id or uuid.uuid4().hex[:12],
            pid=os.getpid(),
            resume=bool(events),
            gpus_per_trial=self.gpus_per_trial,
            proposer=proposer.name,
            air_home=str(getattr(self.client, "home", "")),
        )
        self.metric_seen = any(
            self.study.objective.metric in t.metrics for t in self.state.trials.values()
        )
        self.undecided = [
            t.number for t in self.state.ordered() if t.status.is_final() and t.decision is None
        ]
        for t in self.state.trials.values():
            if t.status == TrialStatus.PRUNED and not t.job_done:
                self.cancelling[t.number] = "pruned"
        if self.state.parent_run_id is None:
            self._create_parent()
        else:
            self._tracking(lambda mc: mc.update_run(self.state.parent_run_id, status="RUNNING"))
        active = len(self._active())
        self.log(
            f"study {self.study.name}: {self.dir}"
            + (f" (resumed: {len(self.state.trials)} trials, {active} running)" if events else "")
        )

    def _check_resumable(self, saved: dict[str, Any]) -> None:
        current = self.study.to_dict()
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
            self._decide()
            self._check_stops()
            if self.hard_stop:
                self._cancel_active(self.hard_stop)
            elif not self.soft_stop:
                self._fill()
            self._flush_mirror()  # after the launches: slow MLflow writes never delay a trial
            active = self._active()
            if not active:
                if self.hard_stop or self.soft_stop:
                    self._decide()
                    self._flush_mirror()
                    return self.hard_stop or self.soft_stop or "done"
                self.soft_stop = "nothing left to launch"
                continue
            now = time.time()
            if now - last_prune >= self.prune_every_s:
                self._prune_pass(infos)
                last_prune = now
            if now - max(heartbeat, self.journal.last_write) > 30:
                self.emit("heartbeat", running=len(active))
                heartbeat = now
            try:
                got = self.client.wait([t.job_id for t in active], timeout_s=self.poll_s, any=True)
                infos = {i.job_id: i for i in got}
            except NotFound:
                infos = {}

    # --- slots and launches ---

    def _active(self) -> list[Trial]:
        """Trials whose job has not ended (a pruned trial's job may still be stopping)."""
        return [t for t in self.state.ordered() if t.job_id and not t.job_done]

    def _free_slots(self) -> int:
        active = len(self._active())
        slots = self.study.budget.concurrency - active
        slots = min(
            slots, self.study.budget.trials - len(self.state.trials) + len(self._unlaunched())
        )
        if slots <= 0:
            return 0
        if self.gpus_per_trial > 0:
            free = [
                g
                for g in self.client.gpus()
                if g.health == "ok" and not g.cordoned and not g.job_ids
            ]
            fit = len(free) // self.gpus_per_trial
            slots = min(slots, fit if active else max(fit, 1))
        return max(slots, 0)

    def _unlaunched(self) -> list[Trial]:
        return self.state.by_status(TrialStatus.PROPOSED)

    def _fill(self) -> int:
        """Launch as many trials as there are free slots; returns how many were launched."""
        slots = self._free_slots()
        if slots <= 0:
            return 0
        estimate = self._duration_estimate_s()
        if estimate and self.study.budget.wall_time_min:
            left = self.study.budget.wall_time_min * 60 - self.state.wall_s_now(time.time())
            if estimate > left:
                self.soft_stop = "budget:wall_time_min"
                self.log("not launching more: a trial would not finish within the wall time left")
                return 0
        launched = 0
        for t in self._unlaunched()[:slots]:
            self._launch(t)
            launched += 1
        slots -= launched
        study = self.study
        while slots > 0 and 0 not in self.state.trials:
            self._propose_fixed("baseline", {}, study.base_config, "the base config")
            self._launch(self.state.trials[0])
            launched, slots = launched + 1, slots - 1
        noise_done = sum(1 for t in self.state.trials.values() if t.source == "noise")
        while slots > 0 and noise_done < study.noise.repeats:
            noise_done += 1
            seed_key = study.noise.seed_key
            seed = study.base_config.get(seed_key, 0)
            seed = seed + noise_done if isinstance(seed, int) else noise_done
            config = {**study.base_config, seed_key: seed}
            number = self._propose_fixed(
                "noise", {}, config, f"repeat {noise_done} of the base config, {seed_key}={seed}"
            )
            self._launch(self.state.trials[number])
            launched, slots = launched + 1, slots - 1
        if slots <= 0:
            return launched
        request = self._request(slots)
        assert self._proposer is not None
        result = suggest(self._proposer, request)
        for kind, fields in result.events:
            self.emit(kind, **fields)
        for p in result.proposals:
            number = self.state.next_number
            self.emit(
                "proposal",
                trial=number,
                source=p.source,
                diff=p.diff,
                config=study.config_for(p.diff),
                rationale=p.rationale,
            )
            self._launch(self.state.trials[number])
            launched += 1
        if result.stop_reason:
            self.soft_stop = result.stop_reason
            self.log(f"not launching more: {result.stop_reason}")
        elif not result.proposals and not self._active():
            self.soft_stop = "search space exhausted"
        return launched

    def _propose_fixed(self, source: str, diff: dict, config: dict, why: str) -> int:
        number = self.state.next_number
        self.emit("proposal", trial=number, source=source, diff=diff, config=config, rationale=why)
        return number

    def _request(self, n: int, purpose: str = "propose") -> ProposalRequest:
        return build_request(self.study, self.state, n, purpose, now=time.time())

    def _launch(self, t: Trial) -> None:
        from air_skills.models import JobSpec

        attempt = t.attempt + 1
        tags = {
            "autoresearch.study": self.study.name,
            "autoresearch.study_id": str(self.state.study_id),
            "autoresearch.trial": str(t.number),
            "autoresearch.source": t.source,
        }
        if self.state.parent_run_id:
            tags["mlflow.parentRunId"] = self.state.parent_run_id
        spec = JobSpec(
            command=trial_command(self.study.command),
            name=f"{self.study.name}-t{t.number}",
            workdir=self.study.workdir,
            config=t.config,
            gpus=self.gpus_per_trial,
            experiment=self.study.experiment_name,
            tags=tags,
            env=dict(self.study.env),
            timeout_min=self.study.trial_timeout_min,
            max_retries=0,
            idempotency_key=f"ar-{self.state.study_id}-t{t.number}-a{attempt}",
            project=self.study.project,
            data=self.study.data,
            **({"backend": self.study.backend} if self.study.backend else {}),
        )
        started = time.time()
        info = self.client.launch(spec)
        self.emit(
            "launched",
            trial=t.number,
            job_id=info.job_id,
            run_id=info.run_id,
            attempt=attempt,
            gpus=self.gpus_per_trial,
            launch_s=round(time.time() - started, 4),
        )
        self.log(f"trial {t.number} launched as {info.job_id} ({t.source}): {t.diff or '(base)'}")

    # --- watching ---

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
                self.emit("job_started", trial=t.number, started_at=_ts(info.started_at))
            if info.status.is_terminal():
                self._finished(t, info)

    def _prune_pass(self, infos: dict[str, Any]) -> None:
        if self.study.early_stopping.type == "none" or self.hard_stop:
            return
        for t in self._active():
            info = infos.get(t.job_id or "")
            running = info is None or str(info.status) == "RUNNING"
            # the baseline's runs measure the noise: stopping the unlucky ones would bias it
            if t.is_noise or not running:
                continue
            if t.status == TrialStatus.RUNNING and t.number not in self.cancelling:
                self._maybe_prune(t)

    def _curve(self, job_id: str, metric: str) -> list[list[float]]:
        try:
            m = self.client.metrics(job_id, keys=[metric], history=True, max_points=200)
        except (UnknownMetric, NotFound):
            return []
        except AirError:
            return []
        return [[float(s), float(v)] for s, v in m.history.get(metric, [])]

    def _maybe_prune(self, t: Trial) -> None:
        es = self.study.early_stopping
        metric = self.study.objective.curve_metric
        t.curve = self._curve(t.job_id or "", metric)
        if len(t.curve) < 2:  # one point is no curve (and may be the closing summary)
            return
        others = [
            o.curve
            for o in self.state.trials.values()
            if o.number != t.number
            and o.status in (TrialStatus.SUCCEEDED, TrialStatus.PRUNED)
            and o.curve
        ]
        last_steps = [
            o.curve[-1][0]
            for o in self.state.trials.values()
            if o.status == TrialStatus.SUCCEEDED and o.curve
        ]
        if last_steps and t.curve[-1][0] >= max(last_steps):
            return  # at the last step there is nothing left to save: let it finish
        verdict = median_rule(
            t.curve,
            others,
            minimize=self.study.objective.direction == "minimize",
            min_steps=es.min_steps,
            min_trials=es.min_trials,
            metric=metric,
        )
        if not verdict.prune:
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
        except InvalidState:
            pass  # it ended meanwhile; the next poll records how

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
        started = _ts(info.started_at)
        ended = _ts(info.ended_at) or time.time()
        gpu_s = max(0.0, ended - started) * len(info.gpus or []) if started else 0.0
        status = str(info.status)
        if (
            status == "FAILED"
            and info.failure_kind == "infra"
            and t.attempt <= self.study.max_infra_retries
            and not self.hard_stop
            and t.number not in self.cancelling
        ):
            self.emit(
                "infra_retry", trial=t.number, job_id=t.job_id, message=info.message, gpu_s=gpu_s
            )
            self.log(f"trial {t.number}: infra failure ({info.message}); relaunching")
            self._launch(t)
            return
        fields: dict[str, Any] = {
            "trial": t.number,
            "job_id": t.job_id,
            "run_id": info.run_id,
            "job_status": status,
            "started_at": started,
            "ended_at": ended,
            "gpu_s": round(gpu_s, 3),
            "message": info.message,
        }
        metric = self.study.objective.metric
        latest: dict[str, float] = {}
        if info.run_id:
            try:
                latest = dict(self.client.metrics(t.job_id).latest)
            except AirError as exc:
                if not self.tracking_warned:
                    self.tracking_warned = True
                    self.emit("warning", message=f"cannot read metrics: {exc.message}")
        curve = self._curve(t.job_id or "", self.study.objective.curve_metric) if latest else []
        fields["metrics"] = latest
        fields["curve"] = curve or t.curve
        fields["steps"] = fields["curve"][-1][0] if fields["curve"] else None
        why = self.cancelling.pop(t.number, None)
        if why == "pruned" or t.status == TrialStatus.PRUNED:
            fields["status"] = TrialStatus.PRUNED.value
        elif status == "SUCCEEDED":
            value = latest.get(metric)
            if value is None:
                logged = sorted(latest)
                fields.update(
                    status=TrialStatus.FAILED.value,
                    failure_kind="user",
                    failure=f"the run never logged the objective {metric!r}; it logged: "
                    + (", ".join(logged) or "nothing"),
                )
                self.emit("finished", **fields)
                self.undecided.append(t.number)
                if not self.metric_seen:
                    raise UnknownMetric(
                        f"the objective metric {metric!r} was never logged by trial {t.number}"
                        f" (job {t.job_id}); it logged: {', '.join(logged) or 'nothing'}",
                        hint="set objective.metric to one of the logged keys"
                        f" ({', '.join(logged) or 'log metrics from the script'}), or log"
                        f" {metric!r} from the script (MLflow or a `---` summary block)",
                        key=metric,
                        valid_keys=logged,
                        job_id=t.job_id,
                    )
                return
            self.metric_seen = True
            if not math.isfinite(value):
                fields.update(
                    status=TrialStatus.FAILED.value,
                    failure_kind="user",
                    failure=f"the objective {metric} is {value}",
                    value=value,
                )
            else:
                fields.update(status=TrialStatus.SUCCEEDED.value, value=value)
            step_metric = self.study.objective.step_metric
            if step_metric and not curve and not self.curve_warned:
                self.curve_warned = True
                self.emit(
                    "warning",
                    message=f"step_metric {step_metric!r} has no history in trial {t.number}:"
                    " early stopping cannot judge its curve; it logged "
                    + ", ".join(sorted(latest)),
                )
        elif why is not None or status == "CANCELLED":
            fields.update(
                status=TrialStatus.CANCELLED.value,
                failure=f"cancelled: {why}" if why else info.message,
            )
        else:
            tail = ""
            with contextlib.suppress(AirError):
                tail = self.client.logs(t.job_id, tail=LOG_TAIL_LINES).text
            reason = info.message or status
            if status == "TIMED_OUT":
                reason = f"timed out: {info.message}"
            elif info.failure_kind != "infra":
                reason = failure_reason(tail, info.message or status)
            fields.update(
                status=TrialStatus.FAILED.value,
                failure=reason,
                failure_kind=info.failure_kind or "user",
                log_tail=tail[-4000:],
                exit_code=info.exit_code,
            )
        if fields["status"] == TrialStatus.PRUNED.value:
            fields["value"] = t.value
        self.emit("finished", **fields)
        self.undecided.append(t.number)
        shown = fields.get("value")
        self.log(
            f"trial {t.number} {fields['status']}"
            + (f": {metric}={shown:.5g}" if isinstance(shown, float) else "")
            + (f" ({fields['failure']})" if fields.get("failure") else "")
        )

    # --- decisions ---

    def _decide(self) -> None:
        """Record keep/discard for finished trials, in finish order, once the noise floor is
        known (a trial is kept only when it beats the best by more than the floor)."""
        study = self.study
        noise_trials = [t for t in self.state.trials.values() if t.is_noise]
        want_noise = study.noise.repeats > 0
        if want_noise and self.state.noise_floor is None:
            complete = len(noise_trials) == study.noise.repeats + 1 and all(
                t.status.is_final() and t.job_done for t in noise_trials
            )
            if complete:
                values = [
                    t.value
                    for t in noise_trials
                    if t.status == TrialStatus.SUCCEEDED and t.value is not None
                ]
                std, floor = noise_stats(values, study.noise.sigmas)
                self.emit(
                    "noise_floor",
                    values=values,
                    std=std,
                    floor=floor,
                    baseline_value=statistics.fmean(values) if values else None,
                )
                self.log(f"noise floor: {floor:.4g} ({study.noise.sigmas:g} x std {std:.4g})")
                if len(values) < 2:
                    self.emit(
                        "warning",
                        message=f"only {len(values)} baseline run(s) succeeded: noise floor 0",
                    )
        floor_known = not want_noise or self.state.noise_floor is not None
        baseline = self.state.trials.get(0)
        if baseline is not None and baseline.source == "baseline" and baseline.decision is None:
            # every trial is judged against the baseline: decide it first
            if baseline.status.is_final() and baseline.number in self.undecided:
                self.undecided.remove(baseline.number)
                self.undecided.insert(0, baseline.number)
            else:
                floor_known = False
        while self.undecided:
            t = self.state.trials[self.undecided[0]]
            if t.status != TrialStatus.SUCCEEDED:
                decision = {
                    TrialStatus.PRUNED: "pruned",
                    TrialStatus.CANCELLED: "cancelled",
                }.get(t.status, "failed")
                self._decision(t, decision)
            elif not floor_known:
                return
            elif t.is_noise:
                # the first successful run of the base config sets the reference: the mean of
                # all of them when the noise was measured
                if self.state.best_trial is None:
                    value = t.value
                    if want_noise and self.state.noise_values:
                        value = statistics.fmean(self.state.noise_values)
                    self._decision(t, "baseline", best=(t.number, value))
                else:
                    self._decision(t, "noise")
            else:
                floor = self.state.noise_floor or 0.0
                best = self.state.best_value
                assert t.value is not None
                if best is None:
                    keep = True
                else:
                    gain = (
                        best - t.value
                        if study.objective.direction == "minimize"
                        else (t.value - best)
                    )
                    keep = gain > floor
                if keep:
                    self._decision(t, "keep", best=(t.number, t.value))
                    self.log(f"trial {t.number} is the new best: {t.value:.5g}")
                else:
                    self._decision(t, "discard")
            self.undecided.pop(0)

    def _decision(
        self, t: Trial, decision: str, best: tuple[int, float | None] | None = None
    ) -> None:
        best_trial, best_value = best if best else (self.state.best_trial, self.state.best_value)
        self.emit(
            "decision",
            trial=t.number,
            decision=decision,
            value=t.value,
            best_trial=best_trial,
            best_value=best_value,
            floor=self.state.noise_floor,
        )
        if best is not None and best_value is not None:
            self._mirror(
                lambda mc: mc.log_metric(
                    self.state.parent_run_id, "best_value", best_value, step=t.number
                )
            )
        if t.value is not None and math.isfinite(t.value):
            self._mirror(
                lambda mc: mc.log_metric(
                    self.state.parent_run_id, "trial_value", t.value, step=t.number
                )
            )

    # --- budgets and stops ---

    def _check_stops(self) -> None:
        request = take_stop_request(self.dir)
        if request is not None:
            why = request.get("reason") or "stop requested"
            self.emit("stop_requested", **request)
            if request.get("cancel_running", True):
                self.hard_stop = "stop-request"
            else:
                self.soft_stop = "stop-request"
            self.log(f"stop requested: {why}")
        budget = self.study.budget
        now = time.time()
        if budget.wall_time_min and self.state.wall_s_now(now) >= budget.wall_time_min * 60:
            self.hard_stop = self.hard_stop or "budget:wall_time_min"
        if budget.gpu_hours and self.state.gpu_hours(now) >= budget.gpu_hours:
            self.hard_stop = self.hard_stop or "budget:gpu_hours"
        if len(self.state.trials) >= budget.trials and not self._unlaunched():
            self.soft_stop = self.soft_stop or "budget:trials"
        if self.study.proposer.type == "llm" and self.state.llm_usd >= budget.llm_usd:
            self.soft_stop = self.soft_stop or "budget:llm_usd"
        if budget.gpu_hours and not self.hard_stop and not self.soft_stop:
            estimate = self._duration_estimate_s()
            if estimate:
                projected = self.state.gpu_hours(now) + (estimate * self.gpus_per_trial / 3600.0)
                if projected > budget.gpu_hours and self.gpus_per_trial:
                    self.soft_stop = "budget:gpu_hours"

    def _duration_estimate_s(self) -> float | None:
        durations = [
            t.ended_at - t.started_at
            for t in self.state.trials.values()
            if t.status == TrialStatus.SUCCEEDED and t.started_at and t.ended_at
        ]
        return statistics.median(durations) if durations else None

    def _stop_detail(self) -> dict[str, Any]:
        st = self.state
        return {
            "trials": len(st.trials),
            "best_trial": st.best_trial,
            "best_value": st.best_value,
            "wall_min": round(st.wall_s_now(time.time()) / 60, 3),
            "gpu_hours": round(st.gpu_hours(), 5),
            "llm_usd": round(st.llm_usd, 6),
        }

    # --- MLflow mirror ---

    def _mirror(self, action: Callable[[Any], Any]) -> None:
        """Queue an MLflow write; the loop flushes the queue once it has launched trials."""
        self.mirror_queue.append(action)

    def _flush_mirror(self) -> None:
        queue, self.mirror_queue = self.mirror_queue, []
        for action in queue:
            self._tracking(action)

    def _tracking(self, action: Callable[[Any], Any]) -> None:
        """Best effort: the journal is the record; MLflow mirrors it when it can."""
        if not self.state.parent_run_id:
            return
        try:
            action(self.client.tracker.client)
        except Exception as exc:
            if not self.tracking_warned:
                self.tracking_warned = True
                self.emit("warning", message=f"MLflow mirror failed: {str(exc)[:200]}")

    def _create_parent(self) -> None:
        try:
            tracker = self.client.tracker
            exp_id = tracker.experiment_id(self.study.experiment_name)
            run = tracker.client.create_run(
                exp_id,
                run_name=f"study:{self.study.name}",
                tags={
                    "autoresearch.study": self.study.name,
                    "autoresearch.study_id": str(self.state.study_id),
                    "autoresearch.role": "study",
                    "autoresearch.study_dir": str(self.dir),
                },
            )
            run_id = run.info.run_id
            params = {
                "proposer": self.study.proposer.type,
                "objective": f"{self.study.objective.metric}:{self.study.objective.direction}",
                "budget.trials": self.study.budget.trials,
                "budget.concurrency": self.study.budget.concurrency,
                "noise.repeats": self.study.noise.repeats,
                "search_space": ",".join(self.study.search_space),
            }
            for k, v in params.items():
                tracker.client.log_param(run_id, k, str(v))
        except Exception as exc:
            self.emit("warning", message=f"no MLflow parent run: {str(exc)[:200]}")
            self.tracking_warned = True
            return
        self.emit("mlflow_parent", run_id=run_id, experiment_id=exp_id)

    def _end_parent(self, status: str) -> None:
        self._tracking(lambda mc: mc.set_terminated(self.state.parent_run_id, status))

    def _report(self) -> None:
        try:
            from autoresearch.report import write_report

            paths = write_report(self.dir)
            self.log(f"report: {paths['report']}")
            self._tracking(
                lambda mc: mc.set_tag(
                    self.state.parent_run_id, "autoresearch.report", paths["report"]
                )
            )
        except Exception as exc:
            self.emit("warning", message=f"report failed: {str(exc)[:200]}")


def trial_command(command: list[str]) -> list[str]:
    """The study's argv, with a bare ``python``/``python3`` taken as this interpreter: the one
    that has the study's packages, even when its virtualenv is not on PATH."""
    if command and command[0] in ("python", "python3"):
        return [sys.executable, *command[1:]]
    return list(command)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def budget_left(study: Study, state: StudyState, now: float) -> dict[str, str]:
    b = study.budget
    left = {"trials": f"{max(0, b.trials - len(state.trials))} of {b.trials} left"}
    if b.wall_time_min:
        used = state.wall_s_now(now) / 60
        left["wall time"] = (
            f"{max(0.0, b.wall_time_min - used):.1f} of {b.wall_time_min:g} min left"
        )
    if b.gpu_hours:
        left["GPU-hours"] = f"{max(0.0, b.gpu_hours - state.gpu_hours(now)):.3f} of {b.gpu_hours:g}"
    if study.proposer.type == "llm":
        left["LLM"] = f"${max(0.0, b.llm_usd - state.llm_usd):.3f} of ${b.llm_usd:g} left"
    return left


def build_request(
    study: Study, state: StudyState, n: int, purpose: str = "propose", now: float | None = None
) -> ProposalRequest:
    now = now or time.time()
    return ProposalRequest(
        study=study,
        trials=tuple(state.ordered()),
        n=n,
        noise_floor=state.noise_floor,
        best_trial=state.best_trial,
        budget_left=budget_left(study, state, now),
        llm_usd_left=max(0.0, study.budget.llm_usd - state.llm_usd),
        purpose=purpose,
    )


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
    from autoresearch.study import check_runnable, default_study_dir, load_study

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


__all__ = ["LOOP_LOG", "LoopResult", "StudyLoop", "build_request", "parse_study", "run_study"]
