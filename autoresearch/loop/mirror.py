"""The study's MLflow mirror: a parent run for the study, with each trial's run as its child.

Best effort: the journal is the record, and MLflow mirrors it when it can. Writes are queued
and flushed after the loop's launches, so a slow tracking server never delays a trial.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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

    def warn_once(self, message: str) -> None:
        if not self.warned:
            self.warned = True
            self._emit("warning", message=message)

    def later(self, action: Action) -> None:
        """Queue an MLflow write; ``flush`` sends the queue."""
        self.queue.append(action)

    def flush(self) -> None:
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
        """Create the study's parent run and journal its id (``mlflow_parent``)."""
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
            self._emit("warning", message=f"no MLflow parent run: {str(exc)[:200]}")
            self.warned = True
            return
        self._emit("mlflow_parent", run_id=run_id, experiment_id=exp_id)

    def resume_parent(self) -> None:
        self.now(lambda mc: mc.update_run(self._parent(), status="RUNNING"))

    def end_parent(self, status: str) -> None:
        self.now(lambda mc: mc.set_terminated(self._parent(), status))

    def decision(self, trial: int, value: float | None, best_value: float | None) -> None:
        """Queue a decision's points: the best so far (when it changed) and the trial's value."""
        if best_value is not None:
            self.later(
                lambda mc: mc.log_metric(self._parent(), "best_value", best_value, step=trial)
            )
        if value is not None:
            self.later(lambda mc: mc.log_metric(self._parent(), "trial_value", value, step=trial))

    def report(self, path: str) -> None:
        self.now(lambda mc: mc.set_tag(self._parent(), "autoresearch.report.report", path))
