"""The study's MLflow mirror: a parent run for the study, with each trial's run as its child.

Best effort: the journal is the record, and MLflow mirrors it when it can. Writes are queued
and flushed after the loop's launches, so a slow tracking server never delays a trial. The
parent run is made beside the loop too (``create_parent`` returns at once, ``settle`` journals
it): the home's tracking writer may take seconds to start (MLflow's import), and the first
trials went out only after it, so a short wall-time budget ended before any trial launched.
A trial launched before the parent existed is made its child when its decision is mirrored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills.tracking import writer
from autoresearch.spec.study_schema import Study

Action = Callable[[Any], Any]  # takes an MlflowClient


class StudyMirror:
    """Mirrors one study's journal into MLflow; ``emit`` journals what went wrong, once."""

    def __init__(
        self,
        emit: Callable[..., Any],
        tracker: Callable[[], Any],
        parent_run_id: Callable[[], str | None],
    ) -> None:
        self._emit = emit
        self._tracker = tracker  # called only when MLflow is written to: the client is lazy
        self._parent = parent_run_id
        self.queue: list[Action] = []
        self.warned = False  # one warning per session: a dead tracking server is not news
        self._making: threading.Thread | None = None  # the parent run being made
        self._made: tuple[str, Any] | None = None  # ("ok", (run_id, exp_id)) or ("error", msg)
        self.made_here = False  # made in this session: a trial may have gone out before it

    def warn_once(self, message: str) -> None:
        if not self.warned:
            self.warned = True
            self._emit("warning", message=message)

    def later(self, action: Action) -> None:
        """Queue an MLflow write; ``flush`` sends the queue."""
        self.queue.append(action)

    def flush(self) -> None:
        self.settle()
        if self._making is not None:
            return  # kept until the parent run exists
        queue, self.queue = self.queue, []
        for action in queue:
            self.now(action)

    def now(self, action: Action) -> None:
        """Write to MLflow now, when the study has a parent run; a failure only warns."""
        if not self._parent():
            return
        try:
            action(self._tracker().client)
        except Exception as exc:
            self.warn_once(f"MLflow mirror failed: {str(exc)[:200]}")

    def create_parent(self, study: Study, study_id: str | None, study_dir: Path) -> None:
        """Start making the study's parent run beside the loop; ``settle`` journals its id
        (``mlflow_parent``) or the warning once it is made."""
        thread = threading.Thread(
            target=self._make_parent,
            args=(study, study_id, study_dir),
            name="study-mlflow-parent",
            daemon=True,
        )
        self._making = thread
        thread.start()
        if not writer.enabled():
            # MLflow in this process (AIR_TRACKING_WRITER=off): its import from two threads at
            # once breaks it (runtime/runs/run_end.py), and the launches import it too
            self.settle(wait=True)

    def _make_parent(self, study: Study, study_id: str | None, study_dir: Path) -> None:
        # runs in its thread: no journal write here (``settle`` does it in the loop's thread)
        try:
            tracker = self._tracker()
            exp_id = tracker.experiment_id(study.experiment_name)
            run = tracker.client.create_run(
                exp_id,
                run_name=f"study:{study.name}",
                tags={
                    "autoresearch.study.study": study.name,
                    "autoresearch.study_id": str(study_id),
                    "autoresearch.role": "study",
                    "autoresearch.study_dir": str(study_dir),
                },
            )
            run_id = run.info.run_id
            params = {
                "proposer": study.proposer.type,
                "objective": f"{study.objective.metric}:{study.objective.direction}",
                "budget.trials": study.budget.trials,
                "budget.concurrency": study.budget.concurrency,
                "noise.repeats": study.noise.repeats,
                "search_space": ",".join(study.search_space),
            }
            for k, v in params.items():
                tracker.client.log_param(run_id, k, str(v))
        except Exception as exc:
            self._made = ("error", f"no MLflow parent run: {str(exc)[:200]}")
            return
        self._made = ("ok", (run_id, exp_id))

    def settle(self, wait: bool = False) -> None:
        """Journal the parent run once it is made; ``wait``: wait for it (before its end)."""
        thread = self._making
        if thread is None:
            return
        if wait:
            thread.join()
        elif thread.is_alive():
            return
        self._making = None
        kind, made = self._made or ("error", "no MLflow parent run: its maker ended early")
        if kind == "error":
            self._emit("warning", message=made)
            self.warned = True
            self.queue = []
            return
        run_id, exp_id = made
        self.made_here = True
        self._emit("mlflow_parent", run_id=run_id, experiment_id=exp_id)

    def resume_parent(self) -> None:
        self.now(lambda mc: mc.update_run(self._parent(), status="RUNNING"))

    def end_parent(self, status: str) -> None:
        self.settle(wait=True)
        self.flush()
        self.now(lambda mc: mc.set_terminated(self._parent(), status))

    def decision(
        self,
        trial: int,
        value: float | None,
        best_value: float | None,
        run_id: str | None = None,
    ) -> None:
        """Queue a decision's points: the best so far (when it changed) and the trial's value;
        the trial's run (``run_id``) is made the parent's child (launched before it existed)."""
        if run_id and (self.made_here or self._making is not None):
            self.later(lambda mc: mc.set_tag(run_id, "mlflow.parentRunId", self._parent()))
        if best_value is not None:
            self.later(
                lambda mc: mc.log_metric(self._parent(), "best_value", best_value, step=trial)
            )
        if value is not None:
            self.later(lambda mc: mc.log_metric(self._parent(), "trial_value", value, step=trial))

    def report(self, path: str) -> None:
        self.now(lambda mc: mc.set_tag(self._parent(), "autoresearch.report.report", path))
