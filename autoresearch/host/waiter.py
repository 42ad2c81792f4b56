"""One waiter for every study of a host: a single thread watches the jobs all studies wait on.

A study loop run alone waits on its own trials with ``Client.wait``, which polls the store
with a back-off (a few reads and a reconcile per second). A hundred of them in one process
would poll a hundred times as often. Here each study's wait registers its job ids and sleeps
on an event; one thread looks at SQLite's ``PRAGMA data_version`` (a counter bumped by every
commit from another connection: microseconds to read) four times a second, reads the statuses
of all waited jobs in one query only when it moved, reconciles (dead supervisors, stalls)
every few seconds, and wakes each study whose wait is over: a job ended or stalled, a stop or
steer request arrived in its folder, or the host is stopping. An idle host costs no more CPU
for a hundred studies than for one.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch.study.folder import STOP_FILE
from autoresearch.study.steer_requests import STEER_DIR

TICK_S = 0.25  # how often the waiter looks for a change in the store
FILES_S = 1.0  # how often it looks for stop and steer requests in the study folders
RECONCILE_S = 5.0  # how often it settles jobs whose supervisor died and looks for stalls
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")


@dataclass(eq=False)
class _Wait:
    ids: list[str]
    folder: Path
    any: bool
    since: float
    event: threading.Event = field(default_factory=threading.Event)
    fresh: bool = True  # not looked at yet: its jobs may have ended before it began

    def __post_init__(self) -> None:  # looked at every FILES_S: plain strings, no pathlib
        self.stop_file = os.path.join(self.folder, STOP_FILE)
        self.steer_dir = os.path.join(self.folder, STEER_DIR)


class SharedWaiter:
    """The host's one watcher of jobs; ``wait`` blocks a study's thread until its turn."""

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._waits: set[_Wait] = set()
        self._closed = threading.Event()
        self._stopping = False
        self._kick = threading.Event()
        self.log = log or (lambda line: None)
        self.passes = 0  # status reads done (for the bench and tests)
        self._thread = threading.Thread(target=self._run, name="host-waiter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._kick.set()
        self._thread.join(timeout=5)

    def stop_all(self) -> None:
        """The host is stopping: every wait ends now, and every later one at once."""
        with self._lock:
            self._stopping = True
            for w in self._waits:
                w.event.set()

    def wait(self, ids: Iterable[str], folder: Path, timeout_s: float, any: bool = True) -> None:
        """Block until one of ``ids`` ends (all, without ``any``) or stalls, a request arrives
        in ``folder``, the host stops, or ``timeout_s`` passes. The caller then reads its jobs."""
        w = _Wait(list(dict.fromkeys(ids)), Path(folder), any, time.time())
        with self._lock:
            if self._stopping:
                return
            self._waits.add(w)
        self._kick.set()  # looked at on the next tick, not after the next commit
        try:
            w.event.wait(max(0.0, timeout_s))
        finally:
            with self._lock:
                self._waits.discard(w)

    # --- the one thread ---

    def _run(self) -> None:
        from air_skills.client import Client

        client: Any = None
        version: Any = None
        last_files = last_reconcile = 0.0
        while not self._closed.is_set():
            self._kick.wait(TICK_S)
            self._kick.clear()
            with self._lock:
                waits = [w for w in self._waits if not w.event.is_set()]
            if not waits:
                continue
            try:
                if client is None:
                    client = Client()
                now = time.monotonic()
                reconciled = now - last_reconcile >= RECONCILE_S
                if reconciled:
                    client.reconcile()  # its writes are this connection's: read again below
                    last_reconcile = now
                    self._stalls(client, waits)
                seen = client.store.read("PRAGMA data_version")[0][0]
                changed = seen != version or reconciled
                version = seen
                self._statuses(client, [w for w in waits if changed or w.fresh])
                if now - last_files >= FILES_S:
                    last_files = now
                    for w in waits:
                        if _requested(w):
                            w.event.set()
            except Exception as exc:  # the studies' own waits time out: they go on regardless
                self.log(f"host waiter: {type(exc).__name__}: {str(exc)[:200]}")
                with contextlib.suppress(Exception):
                    if client is not None:
                        client.store.close()
                client, version = None, None
                self._closed.wait(1.0)

    def _statuses(self, client: Any, waits: list[_Wait]) -> None:
        if not waits:
            return
        ids = sorted({j for w in waits for j in w.ids})
        status: dict[str, str] = {}
        for chunk in range(0, len(ids), 500):
            part = ids[chunk : chunk + 500]
            marks = ",".join("?" * len(part))
            for row in client.store.read(
                f"SELECT job_id, status FROM jobs WHERE job_id IN ({marks})", tuple(part)
            ):
                status[row[0]] = row[1]
        self.passes += 1
        for w in waits:
            w.fresh = False
            # a job that is gone is an answer too: the loop records it
            ended = [status.get(j, "FAILED") in TERMINAL for j in w.ids]
            if (w.any and True in ended) or all(ended):
                w.event.set()

    def _stalls(self, client: Any, waits: list[_Wait]) -> None:
        from air_skills.runtime.supervision.stall_words import stalls_since

        for w in waits:
            if w.any and stalls_since(client.store, w.ids, w.since):
                w.event.set()


def _requested(w: _Wait) -> bool:
    """A stop or steer request waits in the study's folder."""
    if os.path.exists(w.stop_file):
        return True
    with contextlib.suppress(OSError):
        return any(n.endswith(".json") for n in os.listdir(w.steer_dir))
    return False


class HostedClient:
    """A study's ``Client`` whose ``wait`` goes through the host's shared waiter; every other
    call is the study's own client's. ``cap`` gives the longest wait this study may sleep now
    (its wall-time budget's end, a prune pass due)."""

    def __init__(
        self, client: Any, waiter: SharedWaiter, folder: Path, cap: Callable[[], float]
    ) -> None:
        self._client = client
        self._waiter = waiter
        self._folder = folder
        self._cap = cap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def wait(
        self,
        job_ids: Iterable[str],
        timeout_s: float | None = None,
        any: bool = True,
        on_progress: Callable[[list[Any]], None] | None = None,
    ) -> list[Any]:
        ids = list(dict.fromkeys(job_ids))
        if on_progress is not None or not ids:
            return self._client.wait(ids, timeout_s=timeout_s, any=any, on_progress=on_progress)
        since = time.time()
        limit = self._cap() if timeout_s is None else min(timeout_s, self._cap())
        self._waiter.wait(ids, self._folder, limit, any=any)
        # One look, as Client.wait's last poll (the waiter reconciled for everyone): the
        # infos, and any stall since the wait began said in its job's message.
        from air_skills.backends.info import row_to_info

        infos = [row_to_info(self._client._row(j)) for j in ids]
        if any:
            infos, _ = self._client.stalls(infos, since)
        return infos
