"""A sandboxed job's own MLflow store, and the relay that forwards it into the job's run.

A sandboxed job cannot reach the shared store (it lies in AIR_HOME, hidden): it logs to a
file store in its own folder (``mlruns/``, made here with the run under the same run and
experiment ids), and its supervisor, outside the sandbox, forwards each new metric, param and
tag line, and each new or changed artifact file, to the shared store's run as it arrives. A
job can so change no record but its own run. Artifacts are read without following links (a
link the job made to a file outside its folder is never forwarded). A tracking server
(``http(s)://``) keeps its own access control: jobs log to it directly.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from air_skills.job_folder import JobFolder, open_at

RELAY_DIR = "mlruns"
JOB_TAGS = "air.asked_experiment"  # an air.* tag the job itself sets (job_site/sitecustomize.py)
OFFSETS = ".relay.json"  # what was forwarded already (a later attempt goes on from there)
INTERVAL_S = 0.2
_BATCH = 900  # MLflow takes up to 1,000 metrics per log_batch


def relayed(uri: str) -> bool:
    """Whether a job of this tracking URI logs through the relay (a store on this machine)."""
    return not uri.startswith(("http://", "https://", "databricks"))


def run_dir(jdir: Path, experiment_id: str, run_id: str) -> Path:
    return jdir / RELAY_DIR / experiment_id / run_id


def prepare(jdir: Path, run_id: str, experiment_id: str) -> dict[str, str]:
    """Make the job's own store, holding its run; the environment that points the job at it.
    A retry finds the folder as the last attempt left it: every name is opened by descriptor,
    none followed if a link (a ``mlruns`` the job swapped for a link is refused: OSError)."""
    root = jdir / RELAY_DIR
    exp = root / experiment_id
    run = exp / run_id
    with JobFolder.open(jdir) as top, top.sub(RELAY_DIR, experiment_id, create=True) as e:
        if e.lstat(run_id) is None or not _has(e, run_id, "meta.yaml"):
            with e.sub(run_id, create=True) as r:
                for sub in ("metrics", "params", "tags", "artifacts"):
                    r.mkdir(sub)
                now = int(time.time() * 1000)
                e.write(
                    "meta.yaml",
                    f"artifact_location: file://{exp}\ncreation_time: {now}\n"
                    f"experiment_id: '{experiment_id}'\nlast_update_time: {now}\n"
                    "lifecycle_stage: active\nname: job\n",
                )
                r.write(
                    "meta.yaml",
                    f"artifact_uri: file://{run}/artifacts\nend_time: null\n"
                    f"entry_point_name: ''\nexperiment_id: '{experiment_id}'\n"
                    f"lifecycle_stage: active\nrun_id: {run_id}\nrun_name: job\n"
                    f"run_uuid: {run_id}\nsource_name: ''\nsource_type: 4\nsource_version: ''\n"
                    f"start_time: {now}\nstatus: 1\ntags: []\nuser_id: air\n",
                )
    return {"MLFLOW_TRACKING_URI": f"file://{root}", "MLFLOW_ALLOW_FILE_STORE": "true"}


def _has(folder: JobFolder, sub: str, name: str) -> bool:
    try:
        with folder.sub(sub) as f:
            return f.lstat(name) is not None
    except OSError:
        return False


def _files(jdir: Path, parts: tuple[str, ...]) -> Iterator[tuple[str, int, str]]:
    """(key, its folder's fd, name) of each regular file under ``jdir/parts...`` (a key with
    ``/`` is a nested file), reached by descriptors: nothing is followed out of the job's
    folder. The fds are open while the iteration is."""
    try:
        folder = open_at(jdir, *parts)
    except (OSError, ValueError):
        return
    with folder:
        for key, dir_fd, name, _st in folder.walk_files():
            yield key, dir_fd, name


def _read_at(dir_fd: int, name: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
    """Bytes of the regular file ``name`` from ``offset`` (never a link, never a FIFO)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return b""
    try:
        if not _regular(fd):
            return b""
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


class MetricRelay:
    """Forward what a sandboxed job logs to its own store into its run in the shared store."""

    def __init__(self, jdir: Path, run_id: str, experiment_id: str, uri: str) -> None:
        self.jdir = jdir
        self.run_id = run_id
        self.uri = uri
        self.run = run_dir(jdir, experiment_id, run_id)
        self._parts = (RELAY_DIR, experiment_id, run_id)  # the run's folder, name by name
        self._offsets: dict[str, int] = self._load_offsets()
        self._seen: dict[str, bytes] = {}  # tags and params already forwarded
        self._artifacts: dict[str, tuple[int, int, int]] = {}  # path -> (inode, size, mtime)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self.forwarded = 0
        self.children: Any = None  # child_relay.ChildRuns, once started

    def _load_offsets(self) -> dict[str, int]:
        try:
            with open_at(self.jdir, RELAY_DIR) as relay:
                raw = relay.read(OFFSETS)
        except (OSError, ValueError):
            raw = b""
        try:
            offsets = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return {str(k): int(v) for k, v in offsets.items()} if isinstance(offsets, dict) else {}

    def start(self, mlflow_ready: threading.Event | None) -> MetricRelay:
        """Forward in a thread, once this process's MLflow import is done (``mlflow_ready``)."""
        from air_skills.runtime.execution.child_relay import ChildRuns

        self.children = ChildRuns(self)  # the job's relay only: a child's is never started
        self._thread = threading.Thread(target=self._loop, args=(mlflow_ready,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and forward what is left (at the attempt's end, before the run's)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        try:
            self.pump()
            if self.children is not None:
                self.children.finish()
        except Exception:
            pass
        # The job may have put a link at mlruns/.relay.json (or mlruns): written by descriptor
        # to a fresh file renamed over the name, never through the link.
        try:
            with JobFolder.open(self.jdir) as top, top.sub(RELAY_DIR, create=True) as relay:
                relay.write(OFFSETS, json.dumps(self._offsets))
        except OSError:
            pass  # mlruns is a link or a file now: the next attempt forwards from the start

    def _loop(self, mlflow_ready: threading.Event | None) -> None:
        if mlflow_ready is not None:
            mlflow_ready.wait(timeout=60)
        while not self._stop.is_set():
            try:
                self.pump()
            except Exception:
                pass  # the shared store is busy or down: the lines wait in the job's store
            self._stop.wait(INTERVAL_S)

    def pump(self) -> int:
        """Forward the lines logged since the last call; the number of metrics forwarded."""
        metrics: list[tuple[str, float, int, int]] = []  # (key, value, timestamp, step)
        offsets: dict[str, int] = {}
        for key, dir_fd, name in _files(self.jdir, (*self._parts, "metrics")):
            start = self._offsets.get(key, 0)
            data = _read_at(dir_fd, name, start)
            end = data.rfind(b"\n") + 1
            if end <= 0:
                continue
            for line in data[:end].decode(errors="replace").splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue
                try:
                    ts, value = int(parts[0]), float(parts[1])
                    step = int(parts[2]) if len(parts) > 2 else 0
                except ValueError:
                    continue
                metrics.append((key, value, ts, step))
            offsets[key] = start + end
        params = dict(self._new("params", "p:"))
        tags = dict(
            (k, v)
            for k, v in self._new("tags", "t:")
            # the runtime's own tags stay its own; the job's asked experiment is the job's say
            if not k.startswith(("mlflow.", "air.")) or k == JOB_TAGS
        )
        if metrics or params or tags:
            sink = self._sink()
            for i in range(0, len(metrics), _BATCH):
                sink.log_metrics(self.run_id, metrics[i : i + _BATCH])
            self._offsets.update(offsets)
            self.forwarded += len(metrics)
            if params or tags:
                try:  # a param logged again with another value is refused: metrics went first
                    sink.log_params_tags(self.run_id, params, tags)
                except Exception:
                    pass
        self._forward_artifacts()  # after the metrics: a large file does not hold them up
        if self.children is not None:  # the job's child runs (nested), relayed as its own
            self.children.pump()
        return len(metrics)

    def _forward_artifacts(self) -> None:
        """Copy each artifact file new or changed since the last call into the run."""
        try:
            root = open_at(self.jdir, *self._parts, "artifacts")
        except (OSError, ValueError):
            return
        staging: str | None = None
        try:
            for rel, dir_fd, name, st in root.walk_files():
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                if self._artifacts.get(rel) == stamp:
                    continue
                staging = staging or tempfile.mkdtemp(prefix="air-relay-")
                copy = os.path.join(staging, rel)
                if not _copy_regular(dir_fd, name, copy):
                    continue
                under = os.path.dirname(rel) or None
                self._sink().log_artifact(self.run_id, copy, under)
                self._artifacts[rel] = stamp
        finally:
            root.close()
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)

    def _new(self, folder: str, kind: str) -> list[tuple[str, str]]:
        out = []
        for key, dir_fd, name in _files(self.jdir, (*self._parts, folder)):
            value = _read_at(dir_fd, name, 0, 5000)
            if self._seen.get(kind + key) != value:
                self._seen[kind + key] = value
                out.append((key, value.decode(errors="replace")))
        return out

    def _sink(self) -> Any:
        """Where the lines go: the home's tracking writer (tracking/writer.py: MLflow stays
        out of the supervisor), or MLflow in this process when the writer is off."""
        if self._client is None:
            from air_skills.tracking.writer import RemoteTracker, enabled

            home = self.jdir.parent.parent  # AIR_HOME/jobs/<job id>
            self._client = RemoteTracker(home, self.uri) if enabled() else _LocalSink(self.uri)
        return self._client


class _LocalSink:
    """The relay's writes through MLflow in this process (AIR_TRACKING_WRITER=off)."""

    def __init__(self, uri: str) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(uri)

    def log_metrics(self, run_id: str, points: list[tuple[str, float, int, int]]) -> None:
        from mlflow.entities import Metric

        self.client.log_batch(run_id, metrics=[Metric(*p) for p in points])

    def log_params_tags(self, run_id: str, params: dict[str, str], tags: dict[str, str]) -> None:
        from mlflow.entities import Param, RunTag

        self.client.log_batch(
            run_id,
            params=[Param(k, v) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None) -> None:
        self.client.log_artifact(run_id, path, artifact_path=artifact_path)


def _copy_regular(dir_fd: int, name: str, dest: str) -> bool:
    """Copy the regular file ``name`` (never through a link, never a FIFO) to ``dest``."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        if not _regular(fd):
            return False
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with os.fdopen(os.dup(fd), "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
        return True
    finally:
        os.close(fd)


def open_relay(jdir: Path, run_id: str | None, experiment_id: str | None, uri: str) -> Any:
    """The relay of a sandboxed job whose own store exists (prepare made it); else None.
    Made for a store on this machine, and for a tracking server on its loopback, which a
    sandbox (a network namespace of its own) cannot reach (launch_env.command_launch)."""
    if not run_id:
        return None
    run = run_dir(jdir, experiment_id or "0", run_id)
    if not run.is_dir():
        return None
    return MetricRelay(jdir, run_id, experiment_id or "0", uri)
