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


def artifacts_check(home: Path) -> dict[str, str]:
    """`air doctor`'s line on where experiments keep their artifacts (issue 38.4): every one
    under AIR_HOME (or a tracking server's root); one in some working tree's ./mlruns (made
    before air set an artifact location) is named, with how to move it."""
    name = "MLflow artifacts"
    tracker = MlflowTracker(home)
    if tracker.artifact_root("x") is None:  # a tracking server keeps its own root
        return {"name": name, "status": "ok", "detail": "kept by the tracking server", "next": ""}
    path = sqlite_path(tracker.uri)
    if path is not None and not inspect(path).exists:
        return {"name": name, "status": "ok", "detail": "no store yet", "next": ""}
    try:
        experiments = tracker.client.search_experiments(max_results=1000)
    except Exception:  # the store's own check says why
        return {"name": name, "status": "ok", "detail": "store unreadable (above)", "next": ""}
    inside = home.resolve().as_uri()
    elsewhere = [
        (e.name, e.artifact_location)
        for e in experiments
        if e.artifact_location
        and not e.artifact_location.startswith(inside)
        # MLflow's own "Default" (./mlruns/0 of wherever the store was made): only if used
        and tracker.client.search_runs([e.experiment_id], max_results=1)
    ]
    if not elsewhere:
        return {"name": name, "status": "ok", "detail": f"all under {home}", "next": ""}
    shown = "; ".join(f"{n!r} in {loc}" for n, loc in elsewhere[:3])
    more = f" and {len(elsewhere) - 3} more" if len(elsewhere) > 3 else ""
    first, old = elsewhere[0]
    new = tracker.artifact_root(first) or ""
    src, dst = old.removeprefix("file://"), new.removeprefix("file://")
    how = (
        f"mkdir -p {dst} && cp -a {src}/. {dst}/"
        f" && sqlite3 {path} \"UPDATE runs SET artifact_uri=replace(artifact_uri, '{old}',"
        f" '{new}') WHERE experiment_id IN (SELECT experiment_id FROM experiments WHERE name="
        f"'{first}'); UPDATE experiments SET artifact_location='{new}' WHERE name='{first}'\""
        if path is not None
        else f"copy {old} under AIR_HOME/mlartifacts and point the experiment there"
    )
    return {
        "name": name,
        "status": "warn",
        "detail": f"{len(elsewhere)} experiment(s) keep artifacts outside AIR_HOME: {shown}{more}"
        " (made before air set a location; new experiments go under AIR_HOME/mlartifacts)",
        "next": how
        + f"   # moves {first!r}"
        + (" (then the same for the others)" if len(elsewhere) > 1 else ""),
    }
