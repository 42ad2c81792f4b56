"""What a launch works over: the home and its store (``LaunchContext``), and a job being prepared.

Shared by runtime/launch/prepare.py and runtime/launch/launch_run.py, which import it and not
each other.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.home import default_home, ensure_home, job_dir
from air_skills.runtime.store.store import Store


class LaunchContext:
    """What backends work over: the home folder, its store (one per thread), the tracker.

    Safe to share between threads; the tracker is made on first use (MLflow is slow to import).
    ``make_runs_here``: with no spare run to claim, create the job's MLflow run in this process
    (the Python API: a launch returns the run id); False keeps MLflow out of this process
    (the CLI: a tracking server's run is made over REST, a sqlite one by the job's supervisor).
    ``keep_spares``: a long-lived launcher (air-mcp, the loop) asks for spare runs too; the
    jobs' supervisors make them, off the launch's path (runtime/runs/spare_runs.py).
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        make_runs_here: bool = True,
        keep_spares: bool = False,
    ) -> None:
        self.home = ensure_home(Path(home).expanduser() if home else default_home()).resolve()
        self._local = threading.local()
        self._tracker: Any = None
        self.make_runs_here = make_runs_here
        self.keep_spares = keep_spares

    @property
    def store(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.home)
        return store

    @property
    def tracker(self) -> Any:
        if self._tracker is None:
            from air_skills.tracking.mlflow import MlflowTracker

            self._tracker = MlflowTracker(self.home)
        return self._tracker

    def job_dir(self, job_id: str) -> Path:
        return job_dir(self.home, job_id)

    @property
    def wants_spares(self) -> bool:
        """Whether this process's launches ask for spare runs to be kept."""
        return self.keep_spares or not self.make_runs_here


@dataclass
class PreparedJob:
    """A job's folder and MLflow run, made before the job is recorded in the store.

    ``jdir`` is where the folder is now: its temporary name until ``recording`` renames it
    to ``final_dir``. Paths that outlive the launch (``log_path``) name the final folder.
    """

    job_id: str
    jdir: Path
    final_dir: Path
    name: str
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_note: str | None = None
    code: dict[str, Any] | None = None  # the job's code info (a snapshot job), see job_code
    # A run left to the supervisor (runtime/runs/job_run.py): its tracking URI, and the spare runs
    # found for it, one of which the queue transaction claims (runtime/runs/spare_runs.py).
    run_uri: str | None = None
    run_experiment: str | None = None
    spares: list[tuple[str, str]] = field(default_factory=list)
    claimed: bool = False  # run_id is a spare claimed in the (uncommitted) queue transaction
    # The spare pool (tracking URI, experiment) of a tracked run, however this launch got its
    # run: a launcher that keeps spares asks for it even when it made this one itself.
    pool: tuple[str, str | None] | None = None

    @property
    def log_path(self) -> Path:
        return self.final_dir / "output.log"
