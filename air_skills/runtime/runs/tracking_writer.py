"""One tracking writer per home, the writer's side: the process that holds MLflow and does
the writes that supervisors queue in the home's spool (tracking/writer.py, the caller's side,
says how: requests, replies, the lock, crash safety). Started on demand by a caller; exits
when idle for AIR_SUPERVISOR_LINGER_S.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.tracking.writer import CLIENT_CALLS, LOCK, OP_NAMES, PID, spool


def _tracker(home: Path, uri: str, cache: dict[str, Any]) -> Any:
    if uri not in cache:
        from air_skills.tracking.mlflow import MlflowTracker

        cache[uri] = MlflowTracker(home, uri)
    return cache[uri]


def _set_tags(t: Any, run_id: str, tags: dict[str, str]) -> None:
    from mlflow.entities import RunTag

    t.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def _log_metrics(t: Any, run_id: str, points: list[list[Any]]) -> None:
    from mlflow.entities import Metric

    metrics = [Metric(str(k), float(v), int(ts), int(step)) for k, v, ts, step in points]
    for i in range(0, len(metrics), 1000):
        t.client.log_batch(run_id, metrics=metrics[i : i + 1000])


def _log_data_inputs(
    t: Any, run_id: str, data: list[dict[str, Any]], context: str = "input"
) -> None:
    from air_skills.tracking.data import log_inputs

    log_inputs(t, run_id, data, context=context)


def _top_up(t: Any) -> int:
    from air_skills.runtime.runs.spare_runs import top_up
    from air_skills.runtime.store.store import Store

    store = Store(t.home)
    try:
        return top_up(store, t)
    finally:
        store.close()


def _log_params_tags(t: Any, run_id: str, params: dict[str, str], tags: dict[str, str]) -> None:
    from mlflow.entities import Param, RunTag

    t.client.log_batch(
        run_id,
        params=[Param(k, str(v)) for k, v in params.items()],
        tags=[RunTag(k, str(v)) for k, v in tags.items()],
    )


def _log_artifact(t: Any, run_id: str, path: str, artifact_path: str | None) -> None:
    t.client.log_artifact(run_id, path, artifact_path=artifact_path)


def _client_call(t: Any, method: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if method not in CLIENT_CALLS:
        raise ValueError(f"MlflowClient.{method} is not called through the writer")
    value = getattr(t.client, method)(*args, **kwargs)
    return value.info.run_id if method == "create_run" else None


def _finish_run(
    t: Any, run_id: str, status: str, summary: dict[str, float], index_job: str | None = None
) -> list[str]:
    """End the run; with ``index_job``, then write that job's final results index rows (its
    record is already in: the supervisor queued this end before it and did not wait)."""
    logged = t.finish_run(run_id, status, summary)
    if index_job:
        from air_skills.runtime.runs.run_index import index_end
        from air_skills.runtime.store.store import Store

        store = Store(t.home)
        try:
            index_end(store, index_job, run_id, t.uri)
        except Exception:  # the job stays due: the next read catches up from MLflow
            pass
        finally:
            store.close()
    return list(logged)


def _create_run(t: Any, **kw: Any) -> list[str]:
    """A new run, but never in a sqlite store left half-built since this writer opened it (a
    later schema migration killed midway): refused as a fresh process's open refuses it."""
    from air_skills.tracking.sqlite_store import half_built_error, inspect, sqlite_path

    path = sqlite_path(t.uri)
    state = inspect(path) if path is not None else None
    if path is not None and state is not None and state.problem is not None:
        raise half_built_error(path, state)
    return list(t.create_run(**kw))


OPS: dict[str, Callable[..., Any]] = {
    "ping": lambda t: "ok",
    "create_run": _create_run,
    "fill_run": lambda t, run_id, **kw: t.fill_run(run_id, **kw),
    "set_attempt": lambda t, run_id, attempt: t.set_attempt(run_id, attempt),
    "finish_run": _finish_run,
    "log_text": lambda t, run_id, text, name: t.log_text(run_id, text, name),
    "set_tags": _set_tags,
    "log_metrics": _log_metrics,
    "log_params_tags": _log_params_tags,
    "log_artifact": _log_artifact,
    "log_data_inputs": _log_data_inputs,
    "top_up_spares": _top_up,
    "experiment_id": lambda t, name: t.experiment_id(name),
    "client": _client_call,
}


@contextlib.contextmanager
def _holding_lock(home: Path) -> Iterator[bool]:
    fd = os.open(spool(home) / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False  # another writer has the home
            return
        yield True
    finally:
        os.close(fd)


def _apply(home: Path, req: Path, cache: dict[str, Any]) -> None:
    """Do one request and write its reply, then remove the request (in that order: a kill
    between the two leaves a reply the next writer sees, and it does not do it again)."""
    rid = req.name[len("req-") : -len(".json")]
    res = req.with_name(f"res-{rid}.json")
    if res.exists():
        req.unlink(missing_ok=True)
        return
    body: Any = None
    try:
        body = json.loads(req.read_text())
        fn = OPS[body["op"]]
        value = fn(_tracker(home, body["uri"], cache), *body["args"], **body["kwargs"])
        reply: dict[str, Any] = {"ok": True, "value": value}
    except Exception as exc:  # a bad request or MLflow's refusal: said to the caller
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        reply = {"ok": False, "error": text}
    if isinstance(body, dict) and body.get("reply") is False:  # nobody waits (wait=False)
        req.unlink(missing_ok=True)
        return
    tmp = req.with_name(f".tmp-res-{rid}")
    try:
        tmp.write_text(json.dumps(reply, default=str))
    except (TypeError, ValueError):
        tmp.write_text(json.dumps({"ok": True, "value": None}))
    os.replace(tmp, res)
    req.unlink(missing_ok=True)


assert set(OPS) == OP_NAMES  # the caller's list and this table name the same operations


def serve(home: Path, idle_s: float | None = None) -> int:
    """The writer's loop: apply the spool's requests oldest first until it has been idle for
    ``idle_s`` (default AIR_SUPERVISOR_LINGER_S) or the home is gone; returns how many."""
    if idle_s is None:  # at least a second: a writer per request would import MLflow each time
        idle_s = max(1.0, float(settings.get("AIR_SUPERVISOR_LINGER_S")))
    done = 0
    with _holding_lock(home) as mine:
        if not mine:
            return 0
        cache: dict[str, Any] = {}
        where = spool(home)
        (where / PID).write_text(str(os.getpid()))  # which process holds the lock (doctor, tests)
        last = time.monotonic()
        nap = 0.002
        while True:
            try:
                reqs = sorted(p for p in where.iterdir() if p.name.startswith("req-"))
            except FileNotFoundError:
                return done  # the home was removed
            for req in reqs:
                _apply(home, req, cache)
                done += 1
            now = time.monotonic()
            if reqs:
                last, nap = now, 0.002
                continue
            if now - last >= idle_s or not (home / "air.db").exists():
                return done
            time.sleep(nap)
            nap = min(nap * 1.5, 0.1)


def main() -> None:
    home = Path(sys.argv[1])
    serve(home)


if __name__ == "__main__":
    main()
