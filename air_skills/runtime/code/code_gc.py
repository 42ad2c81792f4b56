"""Retention of code snapshots: ``air gc`` and the daily automatic pass.

A snapshot (manifest and blobs) is kept while a job uses it: every queued or running job's,
and every finished job's that ended within ``AIR_SNAPSHOT_RETENTION_DAYS``. A manifest written
or reused in the last ``GRACE_S`` seconds is kept too: its job may not be in the store yet.
Everything else goes: manifests, blobs no kept manifest names, temp files. The private view
(``jobs/<id>/code``) of a job that ended before the window goes as well: it is a copy, and
``air rerun`` / ``air code export`` read the store, not the view; unless the job wrote into it
(``./checkpoints``, ``./runs``: a file its snapshot did not hold), then it stays with the job.
The collection holds the store's lock exclusively (``snapshot_store.store_lock``), so no
snapshot is taken meanwhile. Stdlib only.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.home import read_job_json
from air_skills.job_folder import JobFolder
from air_skills.runtime.code.job_code import SHARED_VIEWS, VIEW_DIR
from air_skills.runtime.code.job_outputs import wrote_into_view
from air_skills.runtime.code.snapshot_store import code_root, store_lock
from air_skills.runtime.store.store import Store

GRACE_S = 3600.0  # a snapshot taken this recently may belong to a launch still in progress
AUTO_EVERY_S = 86400.0  # the automatic pass runs at most once a day
STAMP = "gc.stamp"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")


def _age_s(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _jobs(store: Store, cutoff: float) -> tuple[set[str], list[str]]:
    """(digests still in use, job ids whose views may go)."""
    keep: set[str] = set()
    old_views: list[str] = []
    for row in store.read("SELECT job_id, status, created_at, ended_at, code FROM jobs"
                          " WHERE code IS NOT NULL", ()):  # fmt: skip
        digest = json.loads(row["code"])["digest"]
        ended = row["ended_at"] or row["created_at"]
        if row["status"] not in TERMINAL or ended >= cutoff:
            keep.add(digest)
        else:
            old_views.append(row["job_id"])
    return keep, old_views


def collect(home: Path, dry_run: bool = False, now: float | None = None) -> dict[str, Any]:
    """Remove what no job within the retention window uses; returns what went (or would)."""
    home = Path(home)
    now = time.time() if now is None else now
    days = float(settings.get("AIR_SNAPSHOT_RETENTION_DAYS"))
    root = code_root(home)
    report: dict[str, Any] = {"dry_run": dry_run, "retention_days": days, "manifests_removed": 0,
                              "blobs_removed": 0, "bytes_freed": 0, "views_removed": 0,
                              "manifests_kept": 0, "blobs_kept": 0}  # fmt: skip
    store = Store(home)
    try:
        with store_lock(home, shared=False):
            keep, old_views = _jobs(store, now - days * 86400)
            # a view the job wrote into (./checkpoints, ./runs) stays until the job is removed
            old_views = [j for j in old_views if not _holds_outputs(home, root, j)]
            live: set[str] = set()
            for path in sorted((root / "manifests").glob("*.json")):
                digest = path.name[: -len(".json")]
                if digest in keep or _age_s(path, now) < GRACE_S:
                    live.update(f["sha256"] for f in _manifest_files(path))
                    report["manifests_kept"] += 1
                else:
                    _remove(path, report, "manifests_removed", dry_run)
            for path in (root / "blobs").glob("*/*"):
                if path.name in live or _age_s(path, now) < GRACE_S:
                    report["blobs_kept"] += 1
                else:
                    _remove(path, report, "blobs_removed", dry_run)
            for path in (root / SHARED_VIEWS).glob("*"):  # Ray's upload folders
                digest = path.name.split("-", 1)[0]
                if digest not in keep and _age_s(path, now) >= GRACE_S:
                    if not dry_run:
                        shutil.rmtree(path, ignore_errors=True)
            for path in (root / "tmp").glob("*"):
                if _age_s(path, now) >= GRACE_S:
                    _remove(path, report, "", dry_run)
        for job_id in old_views:
            # The view lies in the job's folder, the job's to write: looked at and removed by
            # descriptor (a link the job put there is removed, never followed).
            try:
                jobs = JobFolder.open(home / "jobs" / job_id)
            except (OSError, ValueError):
                continue
            with jobs:
                if jobs.is_dir(VIEW_DIR):
                    report["views_removed"] += 1
                    if not dry_run:
                        jobs.remove(VIEW_DIR)
    finally:
        store.close()
    return report


def _holds_outputs(home: Path, root: Path, job_id: str) -> bool:
    """Whether the job wrote into its view: a file its snapshot did not hold (job_outputs)."""
    jdir = home / "jobs" / job_id
    try:
        record = read_job_json(jdir / "code.json")
        manifest = json.loads((root / "manifests" / f"{record['digest']}.json").read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return False  # nothing to compare with: the view goes, as before
    known = [*manifest.get("files", {}), *manifest.get("symlinks", {})]
    return wrote_into_view(jdir / VIEW_DIR, known)


def _manifest_files(path: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads(path.read_bytes())["files"].values())
    except (OSError, ValueError, KeyError):
        return []  # unreadable: its blobs are kept only by other manifests


def _remove(path: Path, report: dict[str, Any], key: str, dry_run: bool) -> None:
    try:
        size = path.stat().st_size
        if not dry_run:
            os.unlink(path)
    except FileNotFoundError:
        return
    report["bytes_freed"] += size
    if key:
        report[key] += 1


def maybe_collect(home: Path) -> dict[str, Any] | None:
    """The automatic pass: a collection when the last one is a day old (one stat otherwise).

    Never raises: a launch that triggers it must not fail because of it.
    """
    stamp = code_root(Path(home)) / STAMP
    try:
        if not stamp.exists():  # a new store: nothing to collect for a day
            if (code_root(Path(home)) / "manifests").is_dir():
                stamp.touch()
            return None
        if time.time() - stamp.stat().st_mtime < AUTO_EVERY_S:
            return None
        stamp.touch()  # first: concurrent launches do not all collect
        return collect(home)
    except Exception:
        return None
