"""What the study page shows, as JSON: the studies list and one study's full view.

A study's journal is read incrementally (only the lines appended since the last look:
``journal.tail``); the running trials' metric curves come from MLflow (through the ``Client``)
and are read at most once a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.errors import AirError
from autoresearch.code.code_check import chain_of
from autoresearch.journal.journal import JOURNAL, StudyState
from autoresearch.journal.tail import JournalTail
from autoresearch.report.cost import Pricing, study_cost
from autoresearch.report.hardware import hardware_note
from autoresearch.report.report import best_so_far, study_of
from autoresearch.report.summary import summarize, trial_outputs
from autoresearch.study.folder import loop_alive
from autoresearch.study.study import STUDIES_DIR, Study
from autoresearch.web.first import FIRST, first_static
from autoresearch.web.live import LIVE_KEYS, live_part
from autoresearch.web.rows import TrialRows

LIVE_CURVE_TTL_S = 1.0
# While trials run, the live part (curves, durations, dollars) is made again at most this
# often; the rest of the view only when the journal (or the loop holding it) changes.
LIVE_TTL_S = 1.0


def find_study_dirs(roots: list[Path]) -> list[Path]:
    """The study folders among ``roots``: a root holding a journal, else its subfolders that do."""
    found: list[Path] = []
    for root in roots:
        root = root.expanduser().resolve()
        if (root / JOURNAL).is_file():
            found.append(root)
        elif root.is_dir():
            found += sorted(p for p in root.iterdir() if (p / JOURNAL).is_file())
    return list(dict.fromkeys(found))


def default_roots() -> list[Path]:
    """./studies, AIR_HOME/studies and every folder in this home's study registry (a study
    started anywhere): read again on each request, so a study started later shows up."""
    from autoresearch.study.registry import INDEX, registered, studies_root

    roots = [Path.cwd() / STUDIES_DIR, studies_root()]
    index = studies_root() / INDEX
    try:
        names = sorted(p.name for p in index.iterdir() if not p.name.startswith("."))
    except OSError:
        names = []
    roots += [f for f in map(registered, names) if f is not None]
    return roots


@dataclass
class ViewParts:
    """A study's view in two parts: ``static`` (made once per journal change) and ``live``
    (LIVE_KEYS, made again while trials run); ``body`` is the whole view's JSON."""

    stamp: tuple
    static_version: str
    static_body: bytes
    budget: dict[str, Any]  # as the journal has it: the live part brings its uses up to date
    metric: str
    ticking: bool  # trials run or the loop lives: the live part changes with the clock
    live_at: float = 0.0
    live_body: bytes = b"{}"
    version: str = ""
    body: bytes = b"{}"
    first_static: bytes | None = None  # a big study's first screen (first.py); None: small

    def with_live(self, live: dict[str, Any]) -> ViewParts:
        live_body = json.dumps(live, default=str, separators=(",", ":")).encode()
        version = hashlib.sha1(self.static_version.encode() + live_body).hexdigest()[:16]
        body = b"".join(
            (b'{"version":"', version.encode(), b'",', self.static_body[1:-1], b",",
             live_body[1:])
        )  # fmt: skip
        return ViewParts(**{**self.__dict__, "live_at": time.monotonic(),
                            "live_body": live_body, "version": version, "body": body})  # fmt: skip

    def first_screen(self) -> bytes:
        """The view for a page's first paint: a big study's first rows and chart points, at a
        version of its own (the page's event stream then sends the whole view)."""
        if self.first_static is None:
            return self.body
        version = (FIRST + self.version).encode()
        return b"".join(
            (b'{"version":"', version, b'",', self.first_static[1:-1], b",", self.live_body[1:])
        )

    def live_event(self) -> bytes:
        """The live part with the whole view's version: what a page needs when only it moved."""
        return b'{"version":"' + self.version.encode() + b'",' + self.live_body[1:]


@dataclass
class StudyIndex:
    """The studies under some roots, each parsed once per change of its journal."""

    roots: list[Path]
    mlflow_url: str | None = "http://127.0.0.1:5000"
    live_metrics: bool = True
    _tails: dict[Path, JournalTail] = field(default_factory=dict)
    _studies: dict[Path, tuple[Any, Study]] = field(default_factory=dict)  # (its dict, parsed)
    _curves: dict[str, tuple[float, list]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _client: Any = None
    _views: dict[Path, ViewParts] = field(default_factory=dict)
    _build: threading.Lock = field(default_factory=threading.Lock)  # one build at a time
    _rows: dict[Path, TrialRows] = field(default_factory=dict)  # used inside _build

    def folders(self) -> dict[str, Path]:
        """{key: folder}: the key is the study's name (its folder's name when two share one)."""
        out: dict[str, Path] = {}
        for folder in find_study_dirs(self.roots or default_roots()):
            try:
                name = self.load(folder)[0].name
            except AirError:
                name = folder.name
            out[folder.name if name in out else name] = folder
        return out

    def load(self, folder: Path) -> tuple[Study, StudyState]:
        """The study and its state, from the lines appended since the last look (JournalTail)."""
        with self._lock:
            tail = self._tails.get(folder) or self._tails.setdefault(folder, JournalTail(folder))
        state = tail.read()
        with self._lock:
            cached = self._studies.get(folder)
            if cached is not None and cached[0] is state.study:
                return cached[1], state
        study = study_of(folder, state)
        with self._lock:
            self._studies[folder] = (state.study, study)
        return study, state

    def studies(self) -> list[dict[str, Any]]:
        """The studies list: name, state, trials done / budget, best, cost so far."""
        out = []
        now = time.time()
        for key, folder in self.folders().items():
            try:
                study, state = self.load(folder)
            except AirError as exc:
                out.append({"key": key, "study_dir": str(folder), "error": str(exc)})
                continue
            s = summarize(folder, study, state)
            done = sum(1 for t in state.trials.values() if t.status.is_final())
            out.append(
                {
                    "key": key,
                    "name": study.name,
                    "study_dir": str(folder),
                    "state": s["state"],
                    "metric": study.objective.metric,
                    "direction": study.objective.direction,
                    "trials_done": done,
                    "trials_total": len(state.trials),
                    "trials_budget": study.budget.trials,
                    "best": s["best"]["value"] if s["best"] else None,
                    "best_trial": s["best"]["trial"] if s["best"] else None,
                    "usd": study_cost(state, now)["usd"],
                    "updated": state.last_ts,
                }
            )
        return out

    def folder_of(self, key: str) -> Path | None:
        return self.folders().get(key)

    def view(self, key: str) -> dict[str, Any] | None:
        """One study's full view (None: no such study)."""
        folder = self.folder_of(key)
        if folder is None:
            return None
        study, state = self.load(folder)
        return study_view(key, folder, study, state, self)

    def view_json(self, key: str, clock_ok: bool = False) -> tuple[str, bytes] | None:
        """(version, JSON bytes) of one study's view (``clock_ok``: a live part up to a few
        seconds old will do, as for a page whose event stream brings the rest)."""
        parts = self.view_parts(key, clock_ok)
        return None if parts is None else (parts.version, parts.body)

    def view_parts(self, key: str, clock_ok: bool = False) -> ViewParts | None:
        """One study's view, its static part made again only when its journal or loop changed,
        its live part at most once a LIVE_TTL_S while trials run (None: no such study)."""
        folder = self.folder_of(key)
        if folder is None:
            return None
        st = os.stat(folder / JOURNAL)
        alive = loop_alive(folder)
        stamp = (key, st.st_size, st.st_mtime_ns, alive.get("pid") if alive else None)
        cached = self._views.get(folder)
        if cached is not None and cached.stamp == stamp:
            if clock_ok or not cached.ticking or time.monotonic() - cached.live_at < LIVE_TTL_S:
                return cached
        with self._build:
            cached = self._views.get(folder)  # another thread may have made it meanwhile
            fresh = cached is not None and cached.stamp == stamp
            if fresh and time.monotonic() - cached.live_at < LIVE_TTL_S:  # type: ignore[union-attr]
                return cached
            study, state = self.load(folder)
            if not fresh:
                table = self._rows.setdefault(folder, TrialRows())
                cached = static_parts(key, folder, study, state, stamp, self.mlflow_url, table)
            assert cached is not None
            live = live_part(state, cached.budget, cached.metric, alive is not None, self)
            parts = cached.with_live(live)
            parts.ticking = bool(live["running"]) or alive is not None
            self._views[folder] = parts
            return parts

    def patch(self, key: str, trial: int) -> dict[str, Any] | None:
        folder = self.folder_of(key)
        if folder is None:
            return None
        _, state = self.load(folder)
        t = state.trials.get(trial)
        if t is None:
            return None
        return {
            "trial": trial,
            "patch": t.patch or "",
            "chain": "\n".join(chain_of(state.trials, trial)),
        }

    def outputs(self, key: str, trial: int) -> dict[str, Any] | None:
        """Where trial ``trial``'s job wrote (its checkpoint folder, ./checkpoints, ./runs, ...):
        asked when the trial is opened, never in the view (a few lstat calls per trial)."""
        folder = self.folder_of(key)
        t = None if folder is None else self.load(folder)[1].trials.get(trial)
        if t is None:
            return None
        return {"trial": trial, "job_id": t.job_id, "outputs": trial_outputs(t)}

    # --- live data from the runtime ---------------------------------------------------------

    def client(self) -> Any:
        if self._client is None:
            from air_skills.client import Client

            self._client = Client()
        return self._client

    def live_curve(self, job_id: str, metric: str) -> list:
        """A running trial's metric history from MLflow ([] when it cannot be read)."""
        if not self.live_metrics:
            return []
        now = time.monotonic()
        cached = self._curves.get(job_id)
        if cached is not None and now - cached[0] < LIVE_CURVE_TTL_S:
            return cached[1]
        curve: list = []
        try:
            m = self.client().metrics(job_id, keys=[metric], history=True, max_points=200)
            curve = [list(p) for p in (m.history or {}).get(metric, [])]
        except (AirError, OSError, ValueError):
            pass
        self._curves[job_id] = (now, curve)
        return curve

    def gpus_in_use(self, job_ids: set[str]) -> list[dict[str, Any]]:
        if not job_ids or not self.live_metrics:
            return []
        try:
            gpus = self.client().gpus()
        except AirError:
            return []
        return [
            {"index": g.index, "name": g.name, "jobs": sorted(set(g.job_ids) & job_ids)}
            for g in gpus
            if set(g.job_ids) & job_ids
        ]


def static_view(
    key: str,
    folder: Path,
    study: Study,
    state: StudyState,
    mlflow: str | None = None,
    table: TrialRows | None = None,
) -> dict[str, Any]:
    """Everything the study page shows that changes only with the journal (LIVE_KEYS too, as
    of now: the live part replaces them); ``table``: the study's rows made before."""
    now = time.time()
    summary = summarize(folder, study, state)
    trials = state.ordered()
    rows = (table or TrialRows()).rows(trials, now, mlflow, state.experiment_id, Pricing())
    best = summary["best"]
    winning = ""
    if best is not None and state.code_base is not None:
        winning = "\n".join(chain_of(state.trials, best["trial"]))
    return {
        "key": key,
        "name": study.name,
        "study_dir": str(folder),
        "state": summary["state"],
        "stop_reason": summary["stop_reason"],
        "objective": summary["objective"],
        "proposer": summary["proposer"],
        "counts": summary["trials"],
        "best": best,
        # the lowest single value, when not the kept best's, and why it was not kept
        # (autoresearch/journal/best.py: the one meaning of "best", as get_study and the report)
        "lowest_seen": summary["lowest_seen"],
        # every steer_study request in the journal (so kept across a resume), in words
        "steering": _steering(state),
        "best_so_far": best_so_far(study, state),
        "noise": {"floor": state.noise_floor, "std": state.noise_std},
        "budget": summary["budget"],
        "trials": rows,
        "lineage": [
            {
                "n": r["n"],
                "parent": r["parent"],
                "status": r["status"],
                "value": r["value"],
                "decision": r["decision"],
                "patch_summary": r["patch_summary"],
            }
            for r in rows
            if r["code"]
        ],
        "winning_patch": winning,
        "hardware_note": hardware_note(trials),
        # the final re-evaluation's verdict first, among the page's notes (no script of its own)
        "warnings": _final_note(summary["final"]) + summary["warnings"],
        "last_error": summary["last_error"],
        "metric": study.objective.step_metric or study.objective.metric,
    }


def _steering(state: StudyState) -> dict[str, Any] | None:
    """Each ``steer`` event as a line ("steered by alice: note: ..."), the pins now in force and
    how many queued items wait (None: never steered)."""
    s = state.steering
    if not s.log:
        return None
    return {"requests": [s.line(e) for e in s.log], "pins": s.pins, "queued": len(s.queue)}


def _final_note(final: dict[str, Any] | None) -> list[str]:
    """The note "final selection: trial 7: val -12.3%, held-out -9.8%: gap 2.5 points"."""
    if not final or final.get("state") != "done" or final.get("winner") is None:
        return []
    return [f"final selection: trial {final['winner']}: {final.get('verdict', '')}"]


ROWS_HERE = "\x00rows\x00"  # a string no view holds (JSON writes \x00 as \u0000)
ROWS_HERE_JSON = json.dumps(ROWS_HERE).encode()


def static_parts(
    key: str,
    folder: Path,
    study: Study,
    state: StudyState,
    stamp: tuple,
    mlflow: str | None,
    table: TrialRows | None = None,
) -> ViewParts:
    table = table or TrialRows()
    view = static_view(key, folder, study, state, mlflow, table)
    budget = view["budget"]
    static = {k: v for k, v in view.items() if k not in LIVE_KEYS}
    # the trials' JSON as the table keeps it, in their place: not 1,000 rows dumped again
    body = json.dumps({**static, "trials": ROWS_HERE}, default=str, separators=(",", ":"))
    body = body.encode().replace(ROWS_HERE_JSON, table.json(), 1)
    return ViewParts(
        first_static=first_static(static),
        stamp=stamp,
        static_version=hashlib.sha1(body).hexdigest()[:16],
        static_body=body,
        budget=budget,
        metric=view["metric"],
        ticking=True,
    )


def study_view(
    key: str, folder: Path, study: Study, state: StudyState, index: StudyIndex | None = None
) -> dict[str, Any]:
    """Everything the study page shows (``index``: None reads nothing live, for a file)."""
    parts = static_parts(key, folder, study, state, (), index.mlflow_url if index else None)
    alive = loop_alive(folder) is not None
    parts = parts.with_live(live_part(state, parts.budget, parts.metric, alive, index))
    return json.loads(parts.body)
