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

RELAY_DIR = "mlruns"
OFFSETS = ".relay.json"  # what was forwarded already (a later attempt goes on from there)
INTERVAL_S = 0.2
_BATCH = 900  # MLflow takes up to 1,000 metrics per log_batch


def relayed(uri: str) -> bool:
    """Whether a job of this tracking URI logs through the relay (a store on this machine)."""
    return not uri.startswith(("http://", "https://", "databricks"))


def run_dir(jdir: Path, experiment_id: str, run_id: str) -> Path:
    return jdir / RELAY_DIR / experiment_id / run_id


def prepare(jdir: Path, run_id: str, experiment_id: str) -> dict[str, str]:
    """Make the job's own store, holding its run; the environment that points the job at it."""
    root = jdir / RELAY_DIR
    exp = root / experiment_id
    run = exp / run_id
    if not (run / "meta.yaml").exists():
        for sub in ("metrics", "params", "tags", "artifacts"):
            (run / sub).mkdir(parents=True, exist_ok=True)
        now = int(time.time() * 1000)
        (exp / "meta.yaml").write_text(
            f"artifact_location: file://{exp}\ncreation_time: {now}\n"
            f"experiment_id: '{experiment_id}'\nlast_update_time: {now}\n"
            "lifecycle_stage: active\nname: job\n"
        )
        (run / "meta.yaml").write_text(
            f"artifact_uri: file://{run}/artifacts\nend_time: null\nentry_point_name: ''\n"
            f"experiment_id: '{experiment_id}'\nlifecycle_stage: active\nrun_id: {run_id}\n"
            f"run_name: job\nrun_uuid: {run_id}\nsource_name: ''\nsource_type: 4\n"
            f"source_version: ''\nstart_time: {now}\nstatus: 1\ntags: []\nuser_id: air\n"
        )
    return {"MLFLOW_TRACKING_URI": f"file://{root}", "MLFLOW_ALLOW_FILE_STORE": "true"}


def _files(folder: Path) -> list[tuple[str, Path]]:
    """(key, file) for each file under ``folder``; a key with ``/`` is a nested file."""
    out: list[tuple[str, Path]] = []
    if folder.is_symlink() or folder.parent.is_symlink():
        return out  # the job's own folder: never followed out of it
    for dirpath, _dirs, names in os.walk(folder, followlinks=False):
        for name in names:
            path = Path(dirpath) / name
            out.append((os.fspath(path.relative_to(folder)), path))
    return out


def _read_regular(path: Path, offset: int = 0, limit: int = 1 << 20) -> bytes:
    """Bytes of a regular file from ``offset`` (non-blocking: a FIFO the job made is skipped)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
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
        self._offsets: dict[str, int] = self._load_offsets()
        self._seen: dict[str, bytes] = {}  # tags and params already forwarded
        self._artifacts: dict[str, tuple[int, int, int]] = {}  # path -> (inode, size, mtime)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self.forwarded = 0

    def _load_offsets(self) -> dict[str, int]:
        raw = _read_regular(self.jdir / RELAY_DIR / OFFSETS)
        try:
            offsets = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return {str(k): int(v) for k, v in offsets.items()} if isinstance(offsets, dict) else {}

    def start(self, mlflow_ready: threading.Event | None) -> MetricRelay:
        """Forward in a thread, once this process's MLflow import is done (``mlflow_ready``)."""
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
        except Exception:
            pass
        (self.jdir / RELAY_DIR).mkdir(exist_ok=True)
        (self.jdir / RELAY_DIR / OFFSETS).write_text(json.dumps(self._offsets))

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
        from mlflow.entities import Metric, Param, RunTag

        metrics: list[Any] = []
        offsets: dict[str, int] = {}
        for key, path in _files(self.run / "metrics"):
            start = self._offsets.get(key, 0)
            data = _read_regular(path, start)
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
                metrics.append(Metric(key, value, ts, step))
            offsets[key] = start + end
        params = [Param(k, v) for k, v in self._new(self.run / "params", "p:")]
        tags = [
            RunTag(k, v)
            for k, v in self._new(self.run / "tags", "t:")
            if not k.startswith(("mlflow.", "air."))  # the runtime's own tags stay its own
        ]
        if metrics or params or tags:
            client = self._mlflow()
            for i in range(0, len(metrics), _BATCH):
                client.log_batch(self.run_id, metrics=metrics[i : i + _BATCH])
            self._offsets.update(offsets)
            self.forwarded += len(metrics)
            if params or tags:
                try:  # a param logged again with another value is refused: metrics went first
                    client.log_batch(self.run_id, params=params, tags=tags)
                except Exception:
                    pass
        self._forward_artifacts()  # after the metrics: a large file does not hold them up
        return len(metrics)

    def _forward_artifacts(self) -> None:
        """Copy each artifact file new or changed since the last call into the run."""
        try:
            root = os.open(self.run / "artifacts", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return
        staging: str | None = None
        try:
            for rel, dir_fd, name, st in _regular_files(root, ""):
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                if self._artifacts.get(rel) == stamp:
                    continue
                staging = staging or tempfile.mkdtemp(prefix="air-relay-")
                copy = os.path.join(staging, rel)
                if not _copy_regular(dir_fd, name, copy):
                    continue
                folder = os.path.dirname(rel) or None
                self._mlflow().log_artifact(self.run_id, copy, artifact_path=folder)
                self._artifacts[rel] = stamp
        finally:
            os.close(root)
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)

    def _new(self, folder: Path, kind: str) -> list[tuple[str, str]]:
        out = []
        for key, path in _files(folder):
            value = _read_regular(path, 0, 5000)
            if self._seen.get(kind + key) != value:
                self._seen[kind + key] = value
                out.append((key, value.decode(errors="replace")))
        return out

    def _mlflow(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(self.uri)
        return self._client


def _regular_files(dir_fd: int, prefix: str) -> Iterator[tuple[str, int, str, os.stat_result]]:
    """(relative path, its folder's fd, name, stat) of each regular file below ``dir_fd``,
    walked by descriptors with no link followed (the job may swap a folder for a link)."""
    with os.scandir(dir_fd) as entries:
        found = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
    for name, st in sorted(found):
        rel = f"{prefix}{name}"
        if stat.S_ISREG(st.st_mode):
            yield rel, dir_fd, name, st
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from _regular_files(sub, rel + "/")
            finally:
                os.close(sub)


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
    """The relay of a sandboxed job whose own store exists (prepare made it); else None."""
    if not run_id or not relayed(uri):
        return None
    run = run_dir(jdir, experiment_id or "0", run_id)
    if not run.is_dir():
        return None
    return MetricRelay(jdir, run_id, experiment_id or "0", uri)
