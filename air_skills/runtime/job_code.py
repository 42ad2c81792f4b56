"""A job's code at launch: snapshot and patch checked first, then its view and its record.

``plan_code`` does everything that can fail before a job exists (the snapshot, the limits,
the patch applied in memory); ``materialize`` then writes the job's ``code/`` view,
``code.json`` and ``code.patch`` into its folder. The code that starts the command reads
``code.json`` back (``launch_env``). Stdlib only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidSpec
from air_skills.runtime.patch import apply_patch
from air_skills.runtime.snapshot import Snapshot, build_view, dirty_diff, take_snapshot
from air_skills.runtime.snapshot_store import read_blob

CODE_RECORD = "code.json"
PATCH_FILE = "code.patch"
VIEW_DIR = "code"
DIFF_ARTIFACT = "code/dirty.diff"


@dataclass
class CodePlan:
    """A checked snapshot (and patch) waiting for its job's folder."""

    snapshot: Snapshot
    patch: str | None = None
    overrides: dict[str, bytes | None] = field(default_factory=dict)
    seconds: float = 0.0

    def info(self) -> dict[str, Any]:
        """The job's code info: ``JobInfo.code`` and the store's ``code`` column."""
        snap, git = self.snapshot, self.snapshot.git
        return {
            "digest": snap.digest,
            "commit": git.commit if git else None,
            "branch": git.branch if git else None,
            "dirty": bool(git and git.dirty),
            "files": snap.files,
            "patched": self.patch is not None,
            "note": "; ".join(snap.notes) or None,
        }

    def tags(self) -> dict[str, str]:
        """MLflow's own source tags and ours, for the job's run."""
        git = self.snapshot.git
        tags = {"air.code.digest": self.snapshot.digest}
        if self.patch is not None:
            tags["air.code.patched"] = "true"
        if git:
            if git.commit:
                tags["mlflow.source.git.commit"] = git.commit
            if git.branch:
                tags["mlflow.source.git.branch"] = git.branch
            if git.repo_url:
                tags["mlflow.source.git.repoURL"] = git.repo_url
            tags["air.code.dirty"] = str(git.dirty).lower()
        return tags

    def summary(self) -> str:
        """What would be snapshotted, for a dry run."""
        snap = self.snapshot
        where = f"commit {snap.git.commit[:12]}" if snap.git and snap.git.commit else snap.mode
        dirty = " (dirty)" if snap.git and snap.git.dirty else ""
        patched = ", patched" if self.patch is not None else ""
        return (
            f"code snapshot of {snap.root}: {snap.files} files, {snap.bytes} bytes,"
            f" digest {snap.digest[:12]}, {where}{dirty}{patched}"
        )


def plan_code(home: Path, workdir: str, patch: str | None, store: bool = True) -> CodePlan:
    """Snapshot ``workdir``'s tree and check ``patch`` against it; nothing in a job folder yet.

    With ``store=False`` (a dry run) nothing is written to the store either.
    """
    started = time.perf_counter()
    snap = take_snapshot(home, workdir, store=store)
    plan = CodePlan(snap, patch)
    if patch is not None:
        files = snap.manifest["files"]

        def read(path: str) -> bytes | None:
            entry = files.get(path)
            if entry is None:
                if path in snap.manifest["symlinks"]:
                    raise InvalidSpec(
                        f"patch refused, nothing was launched: {path} is a symlink in the"
                        " snapshot; patch the file it points to",
                        hint="make the patch with `git diff` from the tree's root",
                        file=path,
                    )
                return None
            if store:
                return read_blob(home, entry["sha256"])
            return (snap.root / path).read_bytes()

        plan.overrides = apply_patch(patch, read)
    plan.seconds = time.perf_counter() - started
    return plan


def materialize(home: Path, plan: CodePlan, jdir: Path) -> dict[str, Any]:
    """Write the job's view, ``code.json`` (and ``code.patch``); return the job's code info."""
    started = time.perf_counter()
    view = jdir / VIEW_DIR
    method = build_view(home, plan.snapshot.manifest, view, plan.overrides)
    cwd = view / plan.snapshot.cwd if plan.snapshot.cwd else view
    cwd.mkdir(parents=True, exist_ok=True)  # a workdir with no files of its own
    if plan.patch is not None:
        (jdir / PATCH_FILE).write_text(plan.patch, encoding="utf-8")
    info = plan.info()
    record = {
        **info,
        "root": str(plan.snapshot.root),
        "cwd": plan.snapshot.cwd,
        "view": str(view),
        "source": plan.snapshot.mode,
        "copy": method,
        "bytes": plan.snapshot.bytes,
        "files_read": plan.snapshot.files_read,
        "snapshot_s": round(plan.seconds, 4),
        "view_s": round(time.perf_counter() - started, 4),
    }
    (jdir / CODE_RECORD).write_text(json.dumps(record, indent=1))
    return info


def dirty_diff_of(plan: CodePlan) -> str:
    """The diff against HEAD to keep with the run ("" when the tree was clean or not git)."""
    git = plan.snapshot.git
    return dirty_diff(plan.snapshot.root) if git and git.dirty and git.commit else ""
