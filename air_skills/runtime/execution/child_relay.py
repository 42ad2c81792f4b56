"""A sandboxed job's child runs (``mlflow.start_run(nested=True)``: folds, sweeps inside one
job), relayed into the shared store as children of the job's run (issue 38.3).

The job's file store (metric_relay.py) holds them beside its own run, under
``mlruns/<experiment>/<run>``. Each new run folder there gets a run in the shared store, in
the job's experiment, tagged ``mlflow.parentRunId`` = the job's run, and a ``MetricRelay`` of
its own that forwards its metrics, params, tags and artifacts as the job's are (by descriptor,
no link followed). At the attempt's end each is ended FINISHED. At most MAX_CHILDREN per job.
"""

from __future__ import annotations

import re
import time
from typing import Any

from air_skills.job_folder import open_at

MAX_CHILDREN = 200  # a job that makes runs in a loop gets this many relayed, no more
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")  # MLflow's file store names a run's folder by its id
_NAME = re.compile(r"^run_name: (.{1,250})$", re.MULTILINE)


class ChildRuns:
    """The child runs of one job's relay (``relay``: its MetricRelay)."""

    def __init__(self, relay: Any) -> None:
        self.relay = relay
        self.children: dict[str, Any] = {}  # folder's run id -> its MetricRelay

    def pump(self) -> None:
        for folder_id in self._new_folders():
            self._start(folder_id)
        for child in list(self.children.values()):
            child.pump()

    def finish(self) -> None:
        """Forward what is left and end each child run (the job's attempt has ended)."""
        for child in self.children.values():
            try:
                child.pump()
                _client(child).set_terminated(child.run_id, "FINISHED")
            except Exception:
                pass  # the shared store is down: the child stays RUNNING, its lines kept

    def _new_folders(self) -> list[str]:
        parts = self.relay._parts  # (mlruns, experiment id, the job's run id)
        try:
            with open_at(self.relay.jdir, *parts[:2]) as exp:
                names = exp.names()
        except (OSError, ValueError):
            return []
        room = MAX_CHILDREN - len(self.children)
        new = [
            n
            for n in sorted(names)
            if _RUN_ID.match(n) and n != parts[2] and n not in self.children
        ]
        return new[: max(room, 0)]

    def _start(self, folder_id: str) -> None:
        parent = self.relay
        exp_id = parent._parts[1]
        try:
            with open_at(parent.jdir, *parent._parts[:2], folder_id) as run:
                meta = run.read("meta.yaml", 4096).decode(errors="replace")
        except (OSError, ValueError):
            return  # not a run folder (yet): looked at again on the next pass
        found = _NAME.search(meta)
        tags = {"mlflow.parentRunId": parent.run_id, "air.child_of": parent.run_id}
        if found:
            tags["mlflow.runName"] = found.group(1).strip().strip("'\"")
        shared = _client(parent).create_run(exp_id, start_time=int(time.time() * 1000), tags=tags)
        child = type(parent)(parent.jdir, folder_id, exp_id, parent.uri)  # a MetricRelay
        child.run_id = shared.info.run_id  # read from the child's folder, written to its run
        child._offsets = {}  # the job's offsets file is the job run's own
        child._client = parent._client  # the same sink (the home's writer, or MLflow here)
        self.children[folder_id] = child


def _client(relay: Any) -> Any:
    """An MlflowClient-like object for the relay's store: create_run, set_terminated (its
    sink's, the home's tracking writer or MLflow in this process)."""
    sink = relay._sink() if hasattr(relay, "_sink") else relay._mlflow()
    return getattr(sink, "client", sink)
