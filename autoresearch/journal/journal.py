"""The study journal: append-only JSONL in the study folder, and the state replayed from it.

Every proposal, rationale, diff, job id, status, metric, decision and cost is one line. The
loop, ``status``, ``report`` and ``--resume`` all read the study's state by replaying it, so a
killed loop loses nothing that it wrote.
"""

from __future__ import annotations

import copy
import enum
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidState
from autoresearch.journal.faults import crash_point
from autoresearch.journal.journal_check import problem
from autoresearch.journal.steering import STEER, Steering
from autoresearch.spec.safe_read import read_regular

JOURNAL = "journal.jsonl"
RERUNS = ("baseline", "noise", "confirm", "final")  # sources no proposer round paid for
HEARTBEAT_S = 30.0


class TrialStatus(str, enum.Enum):
    """Where a trial stands; the last four are final."""

    PROPOSED = "PROPOSED"  #: proposed and journaled, not launched yet
    RUNNING = "RUNNING"  #: its job is queued or running
    SUCCEEDED = "SUCCEEDED"  #: finished and reported the objective
    FAILED = "FAILED"  #: its own code failed, or it never reported the objective
    PRUNED = "PRUNED"  #: stopped early by the early-stopping rule
    CANCELLED = "CANCELLED"  #: stopped by a budget or a stop request

    def is_final(self) -> bool:
        return self in (self.SUCCEEDED, self.FAILED, self.PRUNED, self.CANCELLED)

    def __str__(self) -> str:
        return self.value


# What a prior job's trial says in its rationale (loop/prior.py): not one of the search's.
PRIOR_MARK = "run by hand"


@dataclass
class Trial:
    """One trial as the journal tells it."""

    number: int
    diff: dict[str, Any]
    config: dict[str, Any]
    source: str  # baseline | noise | confirm | tpe | random | llm | fallback:<name> | ...
    rationale: str = ""
    status: TrialStatus = TrialStatus.PROPOSED
    job_id: str | None = None
    run_id: str | None = None
    attempt: int = 0  # launches so far (infra failures relaunch)
    value: float | None = None  # the objective (pruned: the best intermediate value)
    steps: float | None = None  # the last step of the curve
    curve: list[list[float]] = field(default_factory=list)  # [[step, value], ...]
    metrics: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    failure_kind: str | None = None
    message: str | None = None  # its job's own status line (exit code, the sandbox's note)
    log_tail: str | None = None
    decision: str | None = None
    job_done: bool = False  # the job itself has ended (a pruned trial's job may lag)
    proposed_at: float | None = None
    launched_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    gpu_s: float = 0.0
    gpus: int = 0
    patch: str | None = None  # a code trial's own patch, against its parent's code
    parent: int | None = None  # the trial whose code the patch applies to (None: the base)
    patch_summary: dict[str, Any] | None = None  # {"files": {path: [+, -]}, "added", "removed"}
    confirms: int | None = None  # a confirmation run of this trial
    code_digest: str | None = None  # the snapshot its job ran
    gpu_type: str | None = None
    confirmed: dict[str, Any] | None = None  # mean, std, n, paired of a confirmed candidate
    llm_usd: float = 0.0  # its share of the LLM calls of the round that proposed it
    final_of: int | None = None  # a final re-evaluation run of this trial (0: the baseline)
    rule: str | None = None  # the acceptance rule its keep or discard used
    holdout_leak: bool = False  # it logged the held-out metric during the search (flagged)

    @property
    def is_noise(self) -> bool:
        return self.source in ("baseline", "noise")

    @property
    def is_candidate(self) -> bool:
        """A trial judged against the best (not a run of the base config, not a re-run)."""
        return not self.is_noise and self.source not in ("confirm", "final")

    def copy(self) -> Trial:
        """A shallow copy (a third of ``copy.copy``'s time: a fork copies every trial)."""
        out = Trial.__new__(Trial)
        out.__dict__.update(self.__dict__)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["status"] = self.status.value
        return d


class Journal:
    """Append-only JSONL; one ``write`` per event, so concurrent appends do not interleave."""

    def __init__(self, study_dir: Path) -> None:
        self.path = Path(study_dir) / JOURNAL
        self.last_write = 0.0
        self.unreadable = 0  # lines of the last read that were not UTF-8 text
        self.skipped: list[tuple[int, str]] = []  # (line, why) of the last read's non-events
        self.lines: list[int] = []  # the line number of each event the last read returned

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"event": event, "ts": round(time.time(), 4), **fields}
        line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)  # owner-only
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line  # a line cut short by a kill -9 stays on its own
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        self.last_write = record["ts"]
        crash_point(event)
        return record

    def read(self) -> list[dict[str, Any]]:
        """The events, in order. A line that is not a JSON object is skipped: a line cut short
        by a kill -9 (the events before it stand), bytes that are not UTF-8 text (counted in
        ``unreadable``), or JSON that is no event (in ``skipped``, with its line and reason).
        ``lines`` holds each returned event's line number, for ``skipped_warning``."""
        self.unreadable, self.skipped, self.lines = 0, [], []
        if not self.path.exists():
            return []
        # a FIFO or a device in the journal's place is refused, not waited on or read forever
        data = read_regular(self.path, "study journal", max_bytes=None, error=InvalidState)
        return self.parse(data)

    def parse(self, data: bytes, first_line: int = 1) -> list[dict[str, Any]]:
        """The events of ``data`` (whole lines, the first of them line ``first_line``), its
        lines counted into ``unreadable``, ``skipped`` and ``lines`` as ``read`` does (which
        resets them first; ``tail.JournalTail`` adds to them, one appended piece at a time)."""
        out = []
        for number, raw in enumerate(data.split(b"\n"), first_line):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                self.unreadable += 1
                continue
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill -9: the events before it stand
            except (RecursionError, ValueError) as exc:  # nested thousands deep, 5000 digits
                self.skipped.append((number, f"JSON that cannot be read ({type(exc).__name__})"))
                continue
            if isinstance(record, dict) and isinstance(record.get("event"), str):
                out.append(record)
                self.lines.append(number)
            else:
                self.skipped.append((number, problem(record, {}) or "not an event"))
        return out

    def skipped_warning(self, state: StudyState) -> str | None:
        """One line that says which lines of the last ``read`` were skipped and why (the first
        few), or None when every line that was JSON applied."""
        found = self.skipped + [(self.lines[i], why) for i, why in state.skipped]
        if not found:
            return None
        found.sort()
        shown = "; ".join(f"line {n}: {why}" for n, why in found[:3])
        more = f"; and {len(found) - 3} more" if len(found) > 3 else ""
        return (
            f"{len(found)} line(s) of {self.path} are not valid study events: skipped"
            f" ({shown}{more})"
        )

    def notes(self, state: StudyState) -> list[str]:
        """The warnings about the last read's lines that did not apply (for ``state``)."""
        notes = []
        if self.unreadable:
            notes.append(f"{self.unreadable} line(s) of {self.path} are not UTF-8 text: skipped")
        skipped = self.skipped_warning(state)  # JSON of the wrong shape: the reasons
        if skipped:
            notes.append(skipped)
        return notes


@dataclass
class StudyState:
    """The study replayed from its journal."""

    trials: dict[int, Trial] = field(default_factory=dict)
    study: dict[str, Any] | None = None
    study_id: str | None = None
    parent_run_id: str | None = None
    experiment_id: str | None = None
    gpus_per_trial: int | None = None
    code_base: dict[str, Any] | None = None  # a code study's base snapshot (code_base event)
    tampered: dict[int, list[str]] = field(default_factory=dict)  # trial -> protected files
    llm_usd: float = 0.0
    llm_input_tokens: int = 0
    llm_output_tokens: int = 0
    llm_calls: int = 0
    llm_errors: int = 0
    invalid_proposals: int = 0
    fallbacks: int = 0
    noise_values: list[float] = field(default_factory=list)
    noise_std: float | None = None
    noise_floor: float | None = None
    best_trial: int | None = None
    best_value: float | None = None
    stopped: dict[str, Any] | None = None
    last_error: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)  # loop/waste.py's findings
    # the final re-evaluation: its plan (final_started) and its result (final_done)
    final_started: dict[str, Any] | None = None
    final_done: dict[str, Any] | None = None
    holdout_reads: int = 0  # runs of this study that read the held-out split
    steering: Steering = field(default_factory=Steering)  # steer_study's requests (steering.py)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (event index, why): replay
    sessions: int = 0
    started_ts: float | None = None
    last_ts: float | None = None
    events: int = 0

    # --- folding events in ---------------------------------------------------------------

    _session_start: float | None = None
    _closed_wall_s: float = 0.0
    # LLM dollars of the latest proposal round, shared among the trials it proposed
    _round: list[int] = field(default_factory=list)
    _round_usd: float = 0.0

    @property
    def wall_s(self) -> float:
        """Seconds the loop has run, all sessions together (a killed one up to its last line)."""
        current = 0.0
        if self._session_start is not None and self.last_ts is not None:
            current = max(0.0, self.last_ts - self._session_start)
        return self._closed_wall_s + current

    def wall_s_now(self, now: float) -> float:
        if self._session_start is None:
            return self._closed_wall_s
        return self._closed_wall_s + max(0.0, now - self._session_start)

    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        ts = float(ev.get("ts", 0.0))
        self.events += 1
        if self.started_ts is None:
            self.started_ts = ts
        if kind == "session_started":
            self._closed_wall_s = self.wall_s
            self._session_start = ts
            self.last_ts = ts
            self.sessions += 1
            self.stopped = None
            if ev.get("study"):
                self.study = ev["study"]
            self.study_id = ev.get("study_id") or self.study_id
            if ev.get("gpus_per_trial") is not None:
                self.gpus_per_trial = ev["gpus_per_trial"]
            return
        self.last_ts = ts
        trial = self.trials.get(int(ev["trial"])) if "trial" in ev and kind != "proposal" else None
        if kind == "mlflow_parent":
            self.parent_run_id = ev.get("run_id")
            self.experiment_id = ev.get("experiment_id")
        elif kind == "study_updated":
            self.study = ev.get("study") or self.study
        elif kind == STEER:
            self.steering.apply(ev)
        elif kind == "proposal":
            self.steering.taken(ev.get("steer_id"))
            n = int(ev["trial"])
            self.trials[n] = Trial(
                number=n,
                diff=ev.get("diff") or {},
                config=ev.get("config") or {},
                source=ev.get("source", "?"),
                rationale=ev.get("rationale", ""),
                proposed_at=ts,
                patch=ev.get("patch"),
                parent=ev.get("parent"),
                patch_summary=ev.get("patch_summary"),
                confirms=ev.get("confirms"),
                final_of=ev.get("final_of"),
            )
            if self.trials[n].source not in RERUNS and self._round_usd:
                self._round.append(n)
                share = self._round_usd / len(self._round)
                for k in self._round:
                    self.trials[k].llm_usd = share
        elif kind == "code_base":
            self.code_base = {k: v for k, v in ev.items() if k not in ("event", "ts")}
        elif kind == "tampered":
            self.tampered[int(ev["trial"])] = list(ev.get("files") or [])
        elif kind == "launched" and trial is not None:
            trial.job_id = ev.get("job_id")
            trial.run_id = ev.get("run_id")
            trial.attempt = int(ev.get("attempt", trial.attempt + 1))
            trial.gpus = int(ev.get("gpus", 0))
            trial.code_digest = ev.get("code_digest") or trial.code_digest
            trial.gpu_type = ev.get("gpu_type") or trial.gpu_type
            trial.launched_at = ts
            trial.started_at = None
            trial.job_done = False
            if not trial.status.is_final():
                trial.status = TrialStatus.RUNNING
        elif kind == "launch_refused" and trial is not None:  # its code could not be built
            trial.status = TrialStatus.FAILED
            trial.failure = ev.get("failure")
            trial.failure_kind = ev.get("failure_kind") or "patch"
            trial.job_done = True
            trial.ended_at = ts
        elif kind == "job_started" and trial is not None:
            trial.started_at = ev.get("started_at", ts)
        elif kind == "infra_retry" and trial is not None:
            trial.gpu_s += float(ev.get("gpu_s", 0.0))
            trial.job_done = True
            trial.started_at = None
        elif kind == "pruned" and trial is not None:
            trial.status = TrialStatus.PRUNED
            trial.value = ev.get("value")
            trial.steps = ev.get("step")
            trial.failure = ev.get("reason")
            trial.curve = ev.get("curve") or trial.curve
        elif kind == "finished" and trial is not None:
            trial.status = TrialStatus(ev["status"])
            trial.job_done = True
            for key in ("value", "steps", "failure", "failure_kind", "message", "log_tail",
                        "started_at"):  # fmt: skip
                if ev.get(key) is not None:
                    setattr(trial, key, ev[key])
            trial.curve = ev.get("curve") or trial.curve
            trial.metrics = ev.get("metrics") or trial.metrics
            trial.ended_at = ev.get("ended_at", ts)
            trial.gpu_s += float(ev.get("gpu_s", 0.0))
            trial.run_id = ev.get("run_id") or trial.run_id
        elif kind == "decision":
            if trial is not None:
                trial.decision = ev.get("decision")
                trial.confirmed = ev.get("confirmed") or trial.confirmed
                trial.rule = ev.get("rule") or trial.rule
            if ev.get("decision") in ("keep", "baseline"):
                self.best_trial = int(ev["trial"])
                self.best_value = ev.get("best_value", ev.get("value"))
        elif kind == "final_started":
            self.final_started = {k: v for k, v in ev.items() if k not in ("event", "ts")}
        elif kind == "final_done":
            self.final_done = {k: v for k, v in ev.items() if k not in ("event", "ts")}
        elif kind == "holdout_leak" and trial is not None:
            trial.holdout_leak = True
        elif kind == "holdout_read":
            self.holdout_reads += 1
        elif kind == "noise_floor":
            self.noise_values = list(ev.get("values", []))
            self.noise_std = ev.get("std")
            self.noise_floor = ev.get("floor")
        elif kind == "llm_call":
            self.llm_calls += 1
            self.llm_usd += float(ev.get("usd", 0.0))
            if self._round:  # a new round: the last one's trials have their shares
                self._round, self._round_usd = [], 0.0
            self._round_usd += float(ev.get("usd", 0.0))
            self.llm_input_tokens += int(ev.get("input_tokens", 0) or 0)
            self.llm_output_tokens += int(ev.get("output_tokens", 0) or 0)
            if not ev.get("ok", True):
                self.llm_errors += 1
        elif kind == "invalid_proposal":
            self.invalid_proposals += 1
        elif kind == "fallback":
            self.fallbacks += int(ev.get("count", 1))
        elif kind == "warning":
            self.warnings.append(str(ev.get("message", "")))
        elif kind == "check":
            self.checks = [c for c in self.checks if c["code"] != ev["code"]]
            self.checks.append({k: ev.get(k) for k in ("code", "message", "fix", "stop")})
        elif kind == "error":
            self.last_error = {k: ev.get(k) for k in ("code", "message", "hint")}
        elif kind == "stopped":
            self.stopped = {k: v for k, v in ev.items() if k != "event"}

    def fork(self) -> StudyState:
        """A copy that events can be applied to while this one stays as it is (its trials
        copied, shallowly: ``apply`` only assigns their fields)."""
        out = copy.copy(self)
        out.trials = {n: t.copy() for n, t in self.trials.items()}
        out.tampered = dict(self.tampered)
        out.warnings, out.skipped = list(self.warnings), list(self.skipped)
        out.checks = list(self.checks)
        out._round = list(self._round)
        return out

    @property
    def next_number(self) -> int:
        return max(self.trials, default=-1) + 1

    def by_status(self, *statuses: TrialStatus) -> list[Trial]:
        return [t for t in self.ordered() if t.status in statuses]

    def ordered(self) -> list[Trial]:
        return [self.trials[n] for n in sorted(self.trials)]

    @property
    def search_trials(self) -> int:
        """Trials of the search (``budget.trials`` counts these): not the final re-runs, nor
        the jobs run by hand that ``prior_jobs`` brought in (issue 39.7: 27 prior jobs once
        spent a 12-trial budget before the study ran one)."""
        return sum(
            1 for t in self.trials.values() if t.source != "final" and PRIOR_MARK not in t.rationale
        )

    def gpu_hours(self, now: float | None = None) -> float:
        total = 0.0
        for t in self.trials.values():
            if t.job_done or t.started_at is None:
                total += t.gpu_s
            else:
                total += t.gpu_s + max(0.0, (now or time.time()) - t.started_at) * t.gpus
        return total / 3600.0


def replay(events: list[dict[str, Any]], st: StudyState | None = None) -> StudyState:
    """Fold the journal's events into the study's state (``st``: a state to go on from, its
    ``events`` those applied so far). A record that does not fit (wrong types, a trial never
    launched: ``journal_check``) is skipped whole, its reason kept in ``skipped``; the records
    around it still apply."""
    st = StudyState() if st is None else st
    first = st.events + len(st.skipped)  # the index of events[0] among all the journal's
    for i, ev in enumerate(events, first):
        why = problem(ev, st.trials)
        if why is None:
            st.apply(ev)
        else:
            st.skipped.append((i, why))
    return st
