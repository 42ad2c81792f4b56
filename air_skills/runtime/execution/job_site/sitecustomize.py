"""Loaded at the start of every Python process of a tracked air job (this folder leads its
PYTHONPATH); stdlib only, and it imports nothing heavy: MLflow is patched when the job imports it.

``mlflow.set_experiment("name")`` (the most common habit) would fail every run: MLflow refuses
to start the run in MLFLOW_RUN_ID inside another experiment. Here it keeps the experiment air
made for the job (the study's or the launch's: ``--experiment`` chooses it), records the name
asked for as the run's tag ``air.asked_experiment`` and says so on stderr; a
``start_run(experiment_id=...)`` of another experiment is treated alike, and every top-level
``start_run()`` resumes the job's run (MLflow reads MLFLOW_RUN_ID for the first one only).
Then the next ``sitecustomize`` on the path, if any, runs as it would have.
"""

from __future__ import annotations

import os
import sys

TAG = "air.asked_experiment"


def _asked(run_id: str, exp_id: str, asked: object) -> None:
    """Keep the name the script asked for as a tag of the job's run, and say what happened."""
    try:
        from mlflow.tracking import MlflowClient

        MlflowClient().set_tag(run_id, TAG, str(asked))
    except Exception:  # never fail the job over a tag
        pass
    print(
        f"[air] mlflow: experiment {asked!r} asked for; this job logs into the experiment air"
        f" made for it (id {exp_id}), the name kept as tag {TAG} (choose the experiment with"
        " `air launch --experiment`)",
        file=sys.stderr,
        flush=True,
    )


def _patch(mlflow: object) -> None:
    run_id = os.environ.get("MLFLOW_RUN_ID")
    exp_id = os.environ.get("MLFLOW_EXPERIMENT_ID")
    if not run_id or not exp_id or getattr(mlflow, "_air_job_patched", False):
        return
    set_experiment = mlflow.set_experiment  # type: ignore[attr-defined]
    start_run = mlflow.start_run  # type: ignore[attr-defined]

    def air_set_experiment(experiment_name=None, experiment_id=None):
        asked = experiment_id if experiment_id is not None else experiment_name
        if asked is not None and str(asked) != exp_id:
            _asked(run_id, exp_id, asked)
        return set_experiment(experiment_id=exp_id)

    def air_start_run(*args, **kwargs):
        asked = kwargs.get("experiment_id")
        if asked is not None and str(asked) != exp_id:
            _asked(run_id, exp_id, asked)
            kwargs["experiment_id"] = exp_id
        # MLflow resumes MLFLOW_RUN_ID once only (it unsets it): a later top-level run (after
        # end_run, another fold) would be a run of its own that a sandboxed job cannot relay
        top = not args and not kwargs.get("nested") and kwargs.get("run_id") is None
        if top and mlflow.active_run() is None:  # type: ignore[attr-defined]
            kwargs["run_id"] = run_id
            # as MLflow does once it used it: a nested run must not resume it as its "child"
            os.environ.pop("MLFLOW_RUN_ID", None)
        return start_run(*args, **kwargs)

    air_set_experiment.__doc__ = set_experiment.__doc__
    air_start_run.__doc__ = start_run.__doc__
    mlflow.set_experiment = air_set_experiment  # type: ignore[attr-defined]
    mlflow.start_run = air_start_run  # type: ignore[attr-defined]
    mlflow._air_job_patched = True  # type: ignore[attr-defined]


class _Loader:
    """MLflow's own loader, then the patch (every other attribute is the loader's)."""

    def __init__(self, loader: object) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)

    def create_module(self, spec: object) -> object:
        return self._loader.create_module(spec)  # type: ignore[attr-defined]

    def exec_module(self, module: object) -> None:
        self._loader.exec_module(module)  # type: ignore[attr-defined]
        try:
            _patch(module)
        except Exception:  # an MLflow we do not know: left as it is
            pass


class _MlflowFinder:
    """Finds ``mlflow`` as the path would, and patches it once it is loaded."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "mlflow":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)  # type: ignore[arg-type]
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


def _chain() -> None:
    """Run the ``sitecustomize`` this one hides (a distribution's or a virtualenv's)."""
    import importlib.machinery
    import importlib.util

    here = os.path.realpath(os.path.dirname(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("MLFLOW_RUN_ID") and "mlflow" not in sys.modules:
    sys.meta_path.insert(0, _MlflowFinder())
try:
    _chain()
except Exception as exc:  # as Python itself does with a failing sitecustomize
    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback: {exc!r}", file=sys.stderr)
