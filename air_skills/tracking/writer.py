"""One tracking writer per home, the caller's side: MLflow writes handed to the process that
holds MLflow (runtime/runs/tracking_writer.py, the writer's side), so that supervisors do not.

MLflow's import alone is ~170 MB; a supervisor without it ~23 MB. A supervisor (or a study
loop) hands each MLflow write to the home's writer as a request file in a spool
(``AIR_HOME/tracking/req-*.json``, renamed into place whole) and, when it needs the answer
(a run's id, the end of a run before the job's record), waits for the writer's reply file.

- **Started on demand**: whoever queues a request and finds no writer holding the spool's lock
  starts one (``python -m air_skills.runtime.runs.tracking_writer HOME``, its own session); a
  writer left idle for ``AIR_SUPERVISOR_LINGER_S`` exits, as an idle supervisor does.
- **Crash-safe**: a request file is removed only after its reply is written; a writer that
  dies (a kill in the middle of a batch) leaves its requests in the spool, and the next
  writer (started by the waiting caller) applies them. A request done twice is harmless:
  MLflow keeps one copy of a metric point logged twice with the same key, step, time and
  value, and tags and params are set to the same values again.
- **Only named operations** (``OP_NAMES``), with JSON arguments; ``RemoteTracker`` has the
  methods of ``MlflowTracker`` that supervisors call, each one a request.

``AIR_TRACKING_WRITER`` (on/off, default on) chooses it; off, the supervisor imports MLflow as
before. Any failure to reach a writer falls back to MLflow in the calling process.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import TrackingUnavailable

SPOOL = "tracking"  # AIR_HOME/tracking: the requests, the replies, the writer's lock
LOCK = "writer.lock"
LOG = "writer.log"
PID = "writer.pid"  # the pid of the writer that holds (or last held) the lock
WAIT_S = 180.0  # a caller's longest wait for a reply (the writer's MLflow import included)
# What a writer does (runtime/runs/tracking_writer.py's OPS): nothing else is queued.
OP_NAMES = frozenset(
    {"ping", "create_run", "fill_run", "set_attempt", "finish_run", "log_text", "set_tags",
     "log_metrics", "log_params_tags", "log_artifact", "log_data_inputs", "top_up_spares",
     "experiment_id", "client"}
)  # fmt: skip


def enabled() -> bool:
    """Whether MLflow writes go through the home's writer (``AIR_TRACKING_WRITER``)."""
    return settings.get("AIR_TRACKING_WRITER") == "on"


def spool(home: Path) -> Path:
    path = home / SPOOL
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def tracker_for(home: Path, uri: str) -> Any:
    """The tracker a supervisor writes through: the writer's (``RemoteTracker``) when on,
    else an in-process ``MlflowTracker``."""
    if enabled():
        return RemoteTracker(home, uri)
    from air_skills.tracking.mlflow import MlflowTracker

    return MlflowTracker(home, uri)


# --- the caller's side --------------------------------------------------------------------------


def submit(home: Path, uri: str, op: str, *args: Any, **kwargs: Any) -> str:
    """Queue one request; returns its id (the reply, if waited for, is ``res-<id>.json``)."""
    return _queue(home, uri, op, args, kwargs, reply=True)


def _queue(home: Path, uri: str, op: str, args: Any, kwargs: dict[str, Any], *, reply: bool) -> str:
    """Queue one request (``reply``: the writer writes its reply, for a caller that waits)."""
    if op not in OP_NAMES:
        raise ValueError(f"unknown tracking operation {op!r}")
    where = spool(home)
    rid = f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(3).hex()}"
    request = {"uri": uri, "op": op, "args": args, "kwargs": kwargs}
    body = json.dumps(request if reply else {**request, "reply": False})
    tmp = where / f".tmp-{rid}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.replace(tmp, where / f"req-{rid}.json")
    return rid


def call(home: Path, uri: str, op: str, *args: Any, wait_s: float = WAIT_S, **kwargs: Any) -> Any:
    """Queue one request, make sure a writer runs, and wait for its reply; the operation's
    value, or its error raised again (``TrackingUnavailable``)."""
    rid = submit(home, uri, op, *args, **kwargs)
    return wait(home, rid, wait_s)


def wait(home: Path, rid: str, wait_s: float = WAIT_S) -> Any:
    """The reply to request ``rid``; starts a writer whenever none holds the lock (the one
    that had it died, or exited idle before the request landed)."""
    from air_skills.polling import backoff

    res = spool(home) / f"res-{rid}.json"
    checked = 0.0
    for _ in backoff(first_s=0.002, factor=1.5, cap_s=0.05, timeout_s=wait_s):
        if res.exists():
            try:
                reply = json.loads(res.read_text())
            except (OSError, ValueError):
                continue  # being renamed into place: read it next time
            res.unlink(missing_ok=True)
            if reply.get("ok"):
                return reply.get("value")
            raise TrackingUnavailable(
                f"tracking writer: {reply.get('error', 'failed')}",
                hint="check the MLflow store (air doctor); the job runs on",
            )
        now = time.monotonic()
        if now - checked > 0.5:
            checked = now
            ensure_writer(home)
    raise TrackingUnavailable(
        f"the tracking writer gave no reply in {wait_s:.0f} s",
        hint=f"see {spool(home) / LOG}; the request stays queued for the next writer",
    )


def writer_alive(home: Path) -> bool:
    """Whether a writer holds the home's spool lock."""
    fd = os.open(spool(home) / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the lock if this process took it
    return False


# The writers this process started: a supervisor is a subreaper, and its sweep of what a job
# left behind must not kill them (the next write would wait for a cold writer's MLflow import).
_STARTED: list[int] = []


def writer_pids(home: Path) -> list[int]:
    """The pids of the home's writer (its pid file) and of the writers this process started
    (one still importing MLflow has not written its pid yet): for a sweep to spare."""
    pids = list(_STARTED)
    try:
        pid = int((spool(home) / PID).read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:  # not a stale pid taken by another
            if b"tracking_writer" in f.read():
                pids.append(pid)
    except (OSError, ValueError):
        pass
    return pids


def ensure_writer(home: Path) -> None:
    """Start the home's writer unless one runs (two racing starters: one keeps the lock,
    the other exits at once)."""
    if writer_alive(home):
        return
    log = os.open(spool(home) / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        started = subprocess.Popen(
            [sys.executable, "-m", "air_skills.runtime.runs.tracking_writer", str(home)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd=str(home),  # not the starter's folder (a job's workdir may go away)
        )
        _STARTED[:] = [p for p in _STARTED if _running(p)] + [started.pid]
    finally:
        os.close(log)


def _running(pid: int) -> bool:
    """Whether a writer this process started still runs (an ended one is reaped here)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


class RemoteTracker:
    """``MlflowTracker``'s write methods, done by the home's writer. ``wait=False``: each
    write is queued and the caller goes on (no reply; the writer is started if none runs):
    for a launcher that hands a run's completion on after its job is submitted (Slurm)."""

    def __init__(self, home: Path, uri: str, *, wait: bool = True) -> None:
        self.home = home
        self.uri = uri
        self.wait = wait

    def _call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        if self.wait:
            return call(self.home, self.uri, op, *args, **kwargs)
        _queue(self.home, self.uri, op, args, kwargs, reply=False)
        ensure_writer(self.home)
        return None

    def create_run(
        self,
        *,
        job_id: str,
        name: str,
        experiment: str | None,
        config: dict[str, Any],
        tags: dict[str, str],
    ) -> tuple[str, str]:
        run_id, exp_id = self._call(
            "create_run", job_id=job_id, name=name, experiment=experiment, config=config, tags=tags
        )
        return str(run_id), str(exp_id)

    def fill_run(
        self, run_id: str, *, name: str, config: dict[str, Any], tags: dict[str, str]
    ) -> None:
        self._call("fill_run", run_id, name=name, config=config, tags=tags)

    def set_attempt(self, run_id: str, attempt: int) -> None:
        self._call("set_attempt", run_id, attempt)

    def finish_run(
        self, run_id: str, status: str, summary: dict[str, float] | None = None
    ) -> list[str]:
        return list(self._call("finish_run", run_id, status, summary or {}))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._call("log_text", run_id, text, artifact_file)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self._call("set_tags", run_id, tags)

    def log_metrics(self, run_id: str, points: list[tuple[str, float, int, int]]) -> None:
        """(key, value, timestamp ms, step) points, in one batch."""
        self._call("log_metrics", run_id, [list(p) for p in points])

    def log_data_inputs(
        self, run_id: str, data: list[dict[str, Any]], context: str = "input"
    ) -> None:
        """The data inputs as MLflow dataset inputs (the writer fingerprints them)."""
        self._call("log_data_inputs", run_id, data, context)

    def log_params_tags(self, run_id: str, params: dict[str, str], tags: dict[str, str]) -> None:
        self._call("log_params_tags", run_id, params, tags)

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None) -> None:
        """Copy the file ``path`` (kept until this returns) into the run's artifacts."""
        self._call("log_artifact", run_id, path, artifact_path)

    def top_up_spares(self) -> int:
        return int(self._call("top_up_spares") or 0)

    def experiment_id(self, name: str | None) -> str:
        return str(self._call("experiment_id", name))

    @property
    def client(self) -> Any:
        """The few ``MlflowClient`` calls a study's mirror makes (``CLIENT_CALLS``), each one a
        request; ``create_run`` gives back an object with ``info.run_id``."""
        return _RemoteClient(self)


# MlflowClient methods a writer calls for ``RemoteTracker.client`` (JSON arguments only).
CLIENT_CALLS = frozenset(
    {"create_run", "log_param", "log_metric", "set_tag", "update_run", "set_terminated"}
)


class _RemoteClient:
    def __init__(self, tracker: RemoteTracker) -> None:
        self._tracker = tracker

    def __getattr__(self, method: str) -> Any:
        if method not in CLIENT_CALLS:
            raise AttributeError(f"the tracking writer does not call MlflowClient.{method}")

        def call_it(*args: Any, **kwargs: Any) -> Any:
            value = self._tracker._call("client", method, list(args), kwargs)
            if method == "create_run":
                from types import SimpleNamespace

                return SimpleNamespace(info=SimpleNamespace(run_id=str(value)))
            return value

        return call_it
