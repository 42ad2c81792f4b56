"""The end-of-job data re-check: did a job's data inputs change while it ran?"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from air_skills.runtime.store.store import Store

# The re-check may take this long before the job's end is recorded without it (the note
# follows): a replaced 20 GB input must not hold the job's GPUs while it is read.
RECHECK_INLINE_S = 2.0


class DataRecheck:
    """Fingerprint a job's inputs again at its end; a slow check finishes after the end."""

    def __init__(self, home: Path, spec: dict[str, Any], run_id: str | None) -> None:
        self.home = home
        self.data = spec.get("data")
        self.run_id = run_id
        self._thread: threading.Thread | None = None  # still running past RECHECK_INLINE_S
        self._note: list[str] = []

    def start(self, mlflow_ready: threading.Event | None) -> str:
        """The note for the job's message if the check takes under RECHECK_INLINE_S, else ""
        and the note is added once the job's end is recorded and its GPUs are free (finish).

        ``mlflow_ready``: set once this process's MLflow import is done (exit_note may import
        MLflow, and two imports at once break it).
        """
        if not self.data:
            return ""
        from air_skills.tracking.data import exit_note

        if mlflow_ready is not None:
            mlflow_ready.wait(timeout=60)

        def recheck() -> None:
            self._note.append(exit_note(self.home, self.data, self.run_id))

        thread = threading.Thread(target=recheck, daemon=True)
        thread.start()
        thread.join(RECHECK_INLINE_S)
        if thread.is_alive():  # a large or replaced input: the GPUs are not held for it
            self._thread = thread
            return ""
        return "".join(self._note)

    def finish(self, store: Store, job_id: str) -> None:
        """After the job's end is recorded: add the slow re-check's note to its message."""
        if self._thread is None:
            return
        self._thread.join()
        note = "".join(self._note)
        if note:
            store.append_message(job_id, note)
