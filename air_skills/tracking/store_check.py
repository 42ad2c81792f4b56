"""`air doctor`'s look at the MLflow store: opened for real; a half-built one named with its fix."""

from __future__ import annotations

from pathlib import Path

from air_skills.errors import AirError
from air_skills.tracking.mlflow import MlflowTracker
from air_skills.tracking.sqlite_store import inspect, recovery, sqlite_path


def check_store(home: Path) -> tuple[str, str, str]:
    """``(status, detail, next)`` for the tracking store of ``home`` (ok | fail).

    A sqlite store is read first (a half-built one is reported, never opened: MLflow would try
    to migrate it again); then the store is opened through MLflow and searched, as a launch does.
    """
    tracker = MlflowTracker(home)
    shown = tracker.shown_uri()
    path = sqlite_path(tracker.uri)
    if path is not None:
        state = inspect(path)
        if not state.exists:
            return "ok", f"tracking store {shown} (made by the first tracked launch)", ""
        if state.problem is not None:
            if state.runs == 0:
                return (
                    "fail",
                    f"tracking store {shown} is half-built ({state.problem}); it holds no runs",
                    f"nothing to do: the next tracked launch moves it aside ({path.name}.broken-"
                    "<time>) and builds a new one; or move it aside now (mv)",
                )
            held = "an unknown number of runs" if state.runs is None else f"{state.runs} run(s)"
            detail = f"tracking store {shown} is half-built ({state.problem}); it holds {held}"
            return "fail", detail + ", so tracking is off", recovery(path)
    try:
        experiments = tracker.client.search_experiments(max_results=1000)
    except AirError as exc:
        return "fail", exc.message, exc.hint or "check MLFLOW_TRACKING_URI"
    except Exception as exc:
        return "fail", f"tracking store {shown}: {type(exc).__name__}: {exc}"[:400], ""
    return "ok", f"tracking store {shown} (opened: {len(experiments)} experiment(s))", ""
