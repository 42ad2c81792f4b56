"""A job's code at launch: snapshot and patch checked first, then its view and its record.

``plan_code`` does everything that can fail before a job exists (the snapshot, the limits,
the patch applied in memory); ``materialize`` then writes the job's ``code/`` view,
``code.json`` and ``code.patch`` into its folder. The files the snapshot read are already in
a staging view (written from the bytes just hashed), which ``materialize`` renames into the
job's folder; it copies only the files the stat cache answered. The code that starts the
command reads ``code.json`` back (``launch_env``). Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidSpec
from air_skills.job_folder import write_fresh
from air_skills.runtime.code.snapshot import Snapshot, build_view, dirty_diff, take_snapshot
from air_skills.runtime.code.snapshot_store import code_root, read_blob

CODE_RECORD = "code.json"
PATCH_FILE = "code.patch"
VIEW_DIR = "code"
DIFF_ARTIFACT = "code/dirty.diff"
STAGING = "staging"  # under AIR_HOME/code: views written by plan_code, see materialize
STAGING_MAX_AGE_S = 86400.0  # no launch plans for a day
SHARED_VIEWS = "views"  # under AIR_HOME/code: one folder per snapshot (and patch), see shared_view

# The stored snapshot that launches in this context run instead of their workdir's tree (set
# by ``air rerun`` around its launch): the backends call ``plan_code`` with the spec's workdir
# and patch only, so the choice travels beside the spec, in this context only.
_PINNED: ContextVar[Snapshot | None] = ContextVar("air_pinned_snapshot", default=None)


@contextmanager
def pinned_snapshot(snapshot: Snapshot) -> Iterator[None]:
    """Within this block, ``plan_code`` uses ``snapshot`` instead of snapshotting the workdir."""
    token = _PINNED.set(snapshot)
    try:
        yield
    finally:
        _PINNED.reset(token)


@dataclass
class CodePlan:
    """A checked snapshot (and patch) waiting for its job's folder."""

    snapshot: Snapshot
    patch: str | None = None
    overrides: dict[str, bytes | None] = field(default_factory=dict)
    seconds: float = 0.0
    staged: Path | None = None  # the view written while the snapshot read (see plan_code)
    staged_files: frozenset[str] = frozenset()

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
        if self.snapshot.rerun_of:
            tags["air.code.rerun_of"] = self.snapshot.rerun_of
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

    With ``store=False`` (a dry run) nothing is written to the store either. A stored snapshot
    also writes each file it reads into a staging folder (the job's view, from the same bytes
    as the blob): ``materialize`` moves it into the job's folder and copies only the files the
    stat cache answered. A plan never materialized drops its staging folder when collected.
    """
    started = time.perf_counter()
    pinned = _PINNED.get()
    staging = _new_staging(home) if pinned is None and store else None
    try:
        snap = pinned or take_snapshot(home, workdir, store=store, view=staging)
        plan = CodePlan(snap, patch)
        if snap.view is not None:
            plan.staged, plan.staged_files = snap.view, snap.view_files
            snap.view, snap.view_files = None, frozenset()  # the plan owns it now
            weakref.finalize(plan, shutil.rmtree, str(plan.staged), ignore_errors=True)
        if patch is not None:
            from air_skills.runtime.code.patch import apply_patch, check_layout

            plan.overrides = apply_patch(patch, _reader(home, snap))
            check_layout(plan.overrides, snap.manifest["files"], snap.manifest["symlinks"])
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    plan.seconds = time.perf_counter() - started
    return plan


def _reader(home: Path, snap: Snapshot) -> Callable[[str], bytes | None]:
    """A snapshot file's bytes for ``apply_patch`` (None: not in the snapshot)."""
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
        if snap.stored:
            return read_blob(home, entry["sha256"])
        return (snap.root / path).read_bytes()

    return read


def _new_staging(home: Path) -> Path:
    """A fresh staging folder's path (not made yet), after removing those of dead launchers."""
    parent = code_root(home) / STAGING
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        names = []
    host = socket.gethostname()
    for name in names:  # a launcher killed between plan and materialize left it
        pid, _, rest = name.partition("-")
        here = rest.rpartition("@")[2] == host  # a pid names a process on its own host only
        if here and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(parent / name, ignore_errors=True)
        elif _age_s(parent / name) > STAGING_MAX_AGE_S:  # another host's, or its pid reused
            shutil.rmtree(parent / name, ignore_errors=True)
    return parent / f"{os.getpid()}-{secrets.token_hex(8)}@{host}"


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def materialize(
    home: Path, plan: CodePlan, jdir: Path, final_dir: Path | None = None
) -> dict[str, Any]:
    """Write the job's view, ``code.json`` (and ``code.patch``); return the job's code info.

    ``final_dir``: where the folder will be once renamed into place (launches build it under
    a temporary name); ``code.json`` records the view there.
    """
    started = time.perf_counter()
    view = jdir / VIEW_DIR
    present: frozenset[str] = frozenset()
    staged, plan.staged = plan.staged, None  # a second job from this plan copies from the store
    if staged is not None:
        try:
            os.rename(staged, view)  # both under AIR_HOME: one rename, not a copy
            present = plan.staged_files
        except OSError:
            shutil.rmtree(staged, ignore_errors=True)
    method = build_view(home, plan.snapshot.manifest, view, plan.overrides, present=present)
    if present:
        method = "written" if method == "written" else f"written+{method}"
    if plan.snapshot.cwd:  # a workdir with no files of its own (build_view made the view)
        (view / plan.snapshot.cwd).mkdir(parents=True, exist_ok=True)
    if plan.patch is not None:
        (jdir / PATCH_FILE).write_text(plan.patch, encoding="utf-8")
    info = plan.info()
    record = {
        **info,
        "root": str(plan.snapshot.root),
        "repo_url": plan.snapshot.git.repo_url if plan.snapshot.git else None,
        "rerun_of": plan.snapshot.rerun_of,
        "cwd": plan.snapshot.cwd,
        "view": str((final_dir or jdir) / VIEW_DIR),
        "source": plan.snapshot.mode,
        "copy": method,
        "bytes": plan.snapshot.bytes,
        "files_read": plan.snapshot.files_read,
        "snapshot_s": round(plan.seconds, 4),
        "view_s": round(time.perf_counter() - started, 4),
    }
    write_fresh(jdir, CODE_RECORD, json.dumps(record, indent=1))
    return info


def dirty_diff_of(plan: CodePlan) -> str:
    """The diff against HEAD to keep with the run ("" when the tree was clean or not git)."""
    git = plan.snapshot.git
    if plan.snapshot.rerun_of:  # the tree on disk now is not what the rerun runs
        return ""
    return dirty_diff(plan.snapshot.root) if git and git.dirty and git.commit else ""


def shared_view(
    home: Path,
    digest: str,
    manifest: dict[str, Any],
    overrides: dict[str, bytes | None],
    patch: str | None,
) -> Path:
    """The snapshot (and patch) as one folder per content under ``code/views/``, built once.

    The Ray backend uploads it as the job's ``working_dir``: Ray names a package by the hash
    of its files, so the same folder is the same package URI, uploaded once per digest. Jobs
    never run in it (Ray unpacks a copy on the node), so it is shared.
    """
    key = digest if patch is None else f"{digest}-{hashlib.sha256(patch.encode()).hexdigest()[:16]}"
    dest = code_root(home) / SHARED_VIEWS / key
    if dest.is_dir():
        os.utime(dest)  # in use: `air gc` keeps it with its snapshot
        return dest
    tmp = dest.parent / f".{key}.{os.getpid()}-{threading.get_ident()}.tmp"  # per thread too
    shutil.rmtree(tmp, ignore_errors=True)
    build_view(home, manifest, tmp, overrides)
    try:
        os.rename(tmp, dest)
    except OSError:  # another launch built it first: theirs is the same
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def ray_working_dir(home: Path, plan: CodePlan) -> str:
    """The folder the Ray backend uploads for ``plan``: the shared view, at the launch's cwd."""
    snap = plan.snapshot
    view = shared_view(home, snap.digest, snap.manifest, plan.overrides, plan.patch)
    return str(view / snap.cwd if snap.cwd else view)
