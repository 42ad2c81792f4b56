"""MLflow tracking: one run per job, created before it starts, ended with its status.

MLflow is imported lazily (it takes over a second): only processes that track pay for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from air_skills.errors import NotFound, TrackingUnavailable, UnknownMetric
from air_skills.tracking.sqlite_store import (
    build_from_template,
    ensure_store,
    head_without_import,
    sqlite_path,
)

DEFAULT_EXPERIMENT = "air-default"
_CLIENT_LOCK = threading.Lock()  # one MLflow import and store check at a time
SPARE_TAG = "air.spare"  # a run made ahead of its job (runtime/runs/spare_runs.py), not yet given
RUN_STATUS = {
    "SUCCEEDED": "FINISHED",
    "FAILED": "FAILED",
    "CANCELLED": "KILLED",
    "TIMED_OUT": "FAILED",
}


ARTIFACTS_DIR = "mlartifacts"  # under AIR_HOME: every experiment air creates keeps them there


def _folder_name(name: str) -> str:
    """An experiment's artifact folder: its name made safe, and a digest (names may collide
    once made safe)."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:60] or "experiment"
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def tracking_uri(home: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home / 'mlflow.db'}"


@contextlib.contextmanager
def _init_lock(home: Path, uri: str) -> Iterator[None]:
    """Serialise first use of a sqlite store: MLflow's schema migration is not race-safe."""
    if not uri.startswith("sqlite:"):
        yield
        return
    with open(home / "mlflow.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class MlflowTracker:
    """The MLflow side of jobs: experiments, runs, summary values, metric reads."""

    def __init__(self, home: Path, uri: str | None = None) -> None:
        """``uri``: the tracking URI a job was launched with (default: this process's)."""
        self.home = home
        self.uri = uri or tracking_uri(home)
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            with _CLIENT_LOCK:  # a thread topping up spares may ask at the same time
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _make_client(self) -> Any:
        """MlflowClient on a store checked to work (a sqlite one built first if needed)."""
        self._check_server()
        try:
            from mlflow.tracking import MlflowClient

            with _init_lock(self.home, self.uri):
                path = sqlite_path(self.uri)
                if path is not None:  # built aside, renamed into place (see sqlite_store)
                    ensure_store(path, self.artifact_root("Default"))
                client = MlflowClient(tracking_uri=self.uri)
                client.search_experiments(max_results=1)  # touches the store for real
        except TrackingUnavailable:
            raise
        except Exception as exc:
            raise TrackingUnavailable(
                f"MLflow store {self.shown_uri()} unavailable: {_short(exc)}",
                hint="check MLFLOW_TRACKING_URI (or unset it to use AIR_HOME's sqlite store)",
            ) from None
        return client

    def store_without_import(self) -> bool:
        """Whether this sqlite store is there, built from the template (copied, milliseconds)
        if need be, without importing MLflow: a fresh home's first job need not wait for it.
        False for any other store, or where only MLflow can build it (``client`` does)."""
        path = sqlite_path(self.uri)
        if path is None:
            return False
        if path.is_file() and path.stat().st_size > 0:
            return True
        head = head_without_import()
        if head is None:
            return False
        try:
            with _init_lock(self.home, self.uri):
                return build_from_template(path, head, self.artifact_root("Default"))
        except (OSError, TrackingUnavailable):
            return False

    def _check_server(self) -> None:
        """Fail fast on a tracking server that is down (MLflow itself retries for minutes)."""
        if not self.uri.startswith(("http://", "https://")):
            return
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.uri.rstrip("/") + "/health", timeout=3):
                pass
        except (OSError, urllib.error.URLError) as exc:
            raise TrackingUnavailable(
                f"MLflow server {self.shown_uri()} unreachable: {_short(exc)}",
                hint="start the tracking server or fix MLFLOW_TRACKING_URI; jobs still run",
            ) from None

    def shown_uri(self) -> str:
        # Never show credentials that may sit in a tracking URI.
        uri = self.uri
        if "@" in uri and "://" in uri:
            scheme, rest = uri.split("://", 1)
            uri = f"{scheme}://***@{rest.split('@', 1)[1]}"
        return uri

    def experiment_id(self, name: str | None) -> str:
        name = name or DEFAULT_EXPERIMENT
        client = self.client
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        try:
            with _init_lock(self.home, self.uri):
                exp = client.get_experiment_by_name(name)
                if exp is not None:
                    return exp.experiment_id
                return client.create_experiment(name, artifact_location=self.artifact_root(name))
        except Exception:
            # Another process created it between our read and our write: use theirs.
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def artifact_root(self, name: str) -> str | None:
        """Where experiment ``name``'s artifacts go: under AIR_HOME (never ``./mlruns`` of
        whatever folder the first run started from); None for a tracking server (its root)."""
        if self.uri.startswith(("http://", "https://", "databricks")):
            return None
        return (self.home / ARTIFACTS_DIR / _folder_name(name)).resolve().as_uri()

    def create_run(
        self,
        *,
        job_id: str,
        name: str,
        experiment: str | None,
        config: dict[str, Any],
        tags: dict[str, str],
    ) -> tuple[str, str]:
        """Create the job's run; returns (run_id, experiment_id)."""
        from mlflow.entities import Param

        try:
            exp_id = self.experiment_id(experiment)
            run_tags = {**tags, "air.job_id": job_id, "air.attempt": "1"}
            run = self.client.create_run(exp_id, tags=run_tags, run_name=name)
            params = [Param(k, _param_value(v)) for k, v in flatten(config).items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(run.info.run_id, params=params[i : i + 100])
            return run.info.run_id, exp_id
        except TrackingUnavailable:
            raise
        except Exception as exc:
            raise TrackingUnavailable(
                f"cannot create the MLflow run: {_short(exc)}",
                hint="the job runs without a run; check the tracking store",
            ) from None

    def create_spare(self, experiment: str) -> tuple[str, str]:
        """A run made ahead of any job (runtime/runs/spare_runs.py); (run_id, exp_id). It is
        SCHEDULED, not RUNNING: nothing runs in it until a job claims it (``fill_run``)."""
        exp_id = self.experiment_id(experiment)
        run = self.client.create_run(exp_id, tags={SPARE_TAG: "1"}, run_name="air-spare")
        self.client.update_run(run.info.run_id, status="SCHEDULED")
        return run.info.run_id, exp_id

    def fill_run(
        self, run_id: str, *, name: str, config: dict[str, Any], tags: dict[str, str]
    ) -> None:
        """Give a run made ahead (a spare, or one made over REST) its job's name, tags and
        params. The job may have logged params of its own already: a clash leaves its value."""
        from mlflow.entities import Param, RunTag

        self.client.update_run(run_id, status="RUNNING", name=name)  # a spare was SCHEDULED
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        try:
            self.client.delete_tag(run_id, SPARE_TAG)
        except Exception:
            pass  # not a spare (made over REST): no such tag
        params = [Param(k, _param_value(v)) for k, v in flatten(config).items()]
        for i in range(0, len(params), 100):
            chunk = params[i : i + 100]
            try:
                self.client.log_batch(run_id, params=chunk)
            except Exception:  # one clashing key fails the batch: the others one by one
                for param in chunk:
                    try:
                        self.client.log_param(run_id, param.key, param.value)
                    except Exception:
                        pass

    def set_attempt(self, run_id: str, attempt: int) -> None:
        self.client.set_tag(run_id, "air.attempt", str(attempt))

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Set ``tags`` on the run, in one batch."""
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def finish_run(
        self, run_id: str, status: str, summary: dict[str, float] | None = None
    ) -> list[str]:
        """End the run; log summary values the script did not log itself. Returns keys logged."""
        from mlflow.entities import Metric

        logged: list[str] = []
        if summary:
            existing = set(self.client.get_run(run_id).data.metrics)
            now_ms = int(time.time() * 1000)
            metrics = [Metric(k, v, now_ms, 0) for k, v in summary.items() if k not in existing]
            if metrics:
                self.client.log_batch(run_id, metrics=metrics)
                logged = [m.key for m in metrics]
        self.client.set_terminated(run_id, RUN_STATUS.get(status, "FAILED"))
        return logged

    # --- reading back -----------------------------------------------------------------------

    # Fast reads: on a sqlite store, the rows are read straight from MLflow's own tables
    # (metrics, latest_metrics: stable since MLflow 1.x), 10-50x faster than MLflow's ORM path.
    # Any surprise (a schema change, a lock) falls back to MlflowClient.

    def _sql(self, query: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]] | None:
        if not self.uri.startswith("sqlite:///"):
            return None
        import sqlite3

        try:
            conn = sqlite3.connect(f"file:{self.uri[len('sqlite:///') :]}?mode=ro", uri=True)
            try:
                return conn.execute(query, args).fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            return None

    def latest(self, run_id: str) -> dict[str, float]:
        rows = self._sql(f"SELECT key, {_VALUE} FROM latest_metrics WHERE run_uuid = ?", (run_id,))
        if rows:
            return {k: _float(v) for k, v in rows}
        if rows is not None and self._sql("SELECT 1 FROM runs WHERE run_uuid = ?", (run_id,)):
            return {}  # a run with no metric yet: said without importing MLflow (~170 MB)
        try:
            return dict(self.client.get_run(run_id).data.metrics)
        except TrackingUnavailable:
            raise
        except Exception as exc:
            raise NotFound(
                f"MLflow run {run_id} not found: {_short(exc)}",
                hint="the job may have run without tracking",
                run_id=run_id,
            ) from None

    def latest_many(self, runs: dict[str, str]) -> dict[str, dict[str, float]]:
        """Latest values of many runs ({run_id: experiment_id}) in few searches."""
        out: dict[str, dict[str, float]] = {}
        ids = [r for r in runs if r.isalnum()]
        for i in range(0, len(ids), 100):
            chunk = ids[i : i + 100]
            quoted = ",".join(f"'{r}'" for r in chunk)
            found = self.client.search_runs(
                sorted({runs[r] for r in chunk}),
                filter_string=f"attributes.run_id IN ({quoted})",
                max_results=len(chunk),
            )
            out.update({r.info.run_id: dict(r.data.metrics) for r in found})
        return out

    def history(
        self, run_id: str, keys: list[str], max_points: int, latest: dict[str, float] | None = None
    ) -> dict[str, list[list[float]]]:
        known = latest if latest is not None else self.latest(run_id)
        require_metrics(keys, known, f"run {run_id}")
        out = {}
        for key in keys:
            points = self.metric_history(run_id, key)
            out[key] = [[float(s), float(v)] for s, v, _ in downsample(points, max_points)]
        return out

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float, int]]:
        """Every point of one metric as (step, value, timestamp ms), by step then time."""
        points = self._sql(
            f"SELECT step, {_VALUE}, timestamp FROM metrics WHERE run_uuid = ? AND key = ?",
            (run_id, key),
        ) or [(m.step, m.value, m.timestamp) for m in self.client.get_metric_history(run_id, key)]
        points = [(s, _float(v), t) for s, v, t in points]
        points.sort(key=lambda p: (p[0], p[2]))
        return points

    def metric_histories(self, run_ids: list[str], key: str) -> dict[str, list[tuple[int, float]]]:
        """One metric's (step, value) points for many runs: one query on a sqlite store."""
        out: dict[str, list[tuple[int, float, int]]] = {r: [] for r in run_ids}
        for i in range(0, len(run_ids), 500):  # sqlite binds at most 999 parameters
            chunk = run_ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._sql(
                f"SELECT run_uuid, step, {_VALUE}, timestamp FROM metrics"
                f" WHERE key = ? AND run_uuid IN ({marks})",
                (key, *chunk),
            )
            if rows is None:  # not sqlite, or unreadable: one read per run through MLflow
                for run_id in chunk:
                    out[run_id] = list(self.metric_history(run_id, key))
                continue
            for run_id, step, value, ts in rows:
                out[run_id].append((step, value, ts))
        for points in out.values():
            points.sort(key=lambda p: (p[0], p[2]))
        return {r: [(int(s), _float(v)) for s, v, _ in p] for r, p in out.items()}

    # --- writes that callers would otherwise reach through ``client`` for ------------------------

    def delete_run(self, run_id: str) -> None:
        self.client.delete_run(run_id)

    def log_inputs(self, run_id: str, datasets: list[Any]) -> None:
        """Log MLflow ``DatasetInput``s to the run (data lineage)."""
        self.client.log_inputs(run_id, datasets=datasets)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Keep ``text`` as the run's artifact ``artifact_file`` (e.g. a job's dirty diff)."""
        try:
            self.client.log_text(run_id, text, artifact_file)
        except Exception as exc:
            raise TrackingUnavailable(
                f"cannot log {artifact_file} to the MLflow run: {_short(exc)}",
                hint="the job runs; check the tracking store's artifact location",
            ) from None


def require_metrics(keys: list[str], known: dict[str, float], subject: str, **details: Any) -> None:
    """Raise UnknownMetric naming every key of ``keys`` that ``known`` (key -> value) lacks."""
    missing = [k for k in keys if k not in known]
    if missing:
        raise UnknownMetric(
            f"{subject} has no metric {', '.join(missing)}",
            hint="metrics logged: " + (", ".join(sorted(known)) or "none yet"),
            valid_keys=sorted(known),
            **details,
        )


def downsample(
    points: list[tuple[int, float, int]], max_points: int
) -> list[tuple[int, float, int]]:
    """At most ``max_points`` points, evenly spread, always keeping first, last, min and max."""
    n = len(points)
    if max_points <= 0 or n <= max_points:
        return points
    values = [p[1] for p in points]
    protected = {0, n - 1, values.index(min(values)), values.index(max(values))}
    slots = max(max_points - len(protected), 0)
    stride = (n - 1) / (slots + 1)
    spread = {round(j * stride) for j in range(1, slots + 1)} - protected
    keep = sorted(protected | spread)
    # Rounding can make fewer collisions than planned: drop evenly spread extras, never the
    # protected points.
    extra = len(keep) - max(max_points, len(protected))
    if extra > 0:
        drop = set(sorted(spread)[:: max(1, len(spread) // extra)][:extra])
        keep = [i for i in keep if i not in drop]
    return [points[i] for i in keep]


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."


# MLflow stores a NaN as 0.0 with is_nan set (and +-inf as +-float max): read it back as NaN,
# never as a 0.0 that would look like the best loss there is.
_VALUE = "CASE WHEN is_nan THEN NULL ELSE value END"


def _float(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
