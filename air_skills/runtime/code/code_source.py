"""A launched job's code read back from the store: its manifest, patch and where it came from.

``load_job_code(home, job_id, code_column)`` gives a ``JobCode``: the snapshot's manifest, the
job's patch and what applying it gave (the job's code as launched, whatever the job later
wrote in its view), and the record of ``code.json``. Rerun, diff and export build on it; each
refuses clearly a job without a snapshot or whose snapshot ``air gc`` removed. Stdlib only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidState, NotFound
from air_skills.home import job_dir, read_job_env, read_job_file, read_job_json
from air_skills.runtime.code.job_code import CODE_RECORD, PATCH_FILE, shared_view
from air_skills.runtime.code.patch import apply_patch
from air_skills.runtime.code.snapshot import Snapshot, load_manifest, manifest_path
from air_skills.runtime.code.snapshot_files import GitInfo
from air_skills.runtime.code.snapshot_store import blob_path, read_blob


@dataclass
class JobCode:
    """One job's code as launched: the snapshot's manifest plus its patch's result."""

    home: Path
    job_id: str
    digest: str
    manifest: dict[str, Any]
    record: dict[str, Any]  # code.json (or the store's code column for an older job)
    patch: str | None = None
    overrides: dict[str, bytes | None] = field(default_factory=dict)

    @property
    def commit(self) -> str | None:
        return self.record.get("commit")

    @property
    def root(self) -> Path | None:
        root = self.record.get("root")
        return Path(root) if root else None

    def git(self) -> GitInfo | None:
        """Where the snapshot came from (None outside git)."""
        if self.record.get("source", "git" if self.commit else "folder") != "git":
            return None
        return GitInfo(
            commit=self.commit,
            branch=self.record.get("branch"),
            repo_url=self.record.get("repo_url"),
            dirty=bool(self.record.get("dirty")),
        )

    def paths(self) -> set[str]:
        """Every file and symlink of the code as launched."""
        files = set(self.manifest["files"]) | set(self.manifest.get("symlinks", {}))
        added = {p for p, v in self.overrides.items() if v is not None}
        return (files - {p for p, v in self.overrides.items() if v is None}) | added

    def read(self, path: str) -> bytes | None:
        """A file's content as launched (a symlink's target as bytes; None: no such path)."""
        if path in self.overrides:
            return self.overrides[path]
        entry = self.manifest["files"].get(path)
        if entry is not None:
            return read_blob_of(self, entry["sha256"], path)
        target = self.manifest.get("symlinks", {}).get(path)
        return target.encode() if target is not None else None

    def sha(self, path: str) -> str | None:
        """The stored sha256 of an unpatched file (None: patched, a symlink, or absent)."""
        if path in self.overrides:
            return None
        entry = self.manifest["files"].get(path)
        return entry["sha256"] if entry else None

    def mode(self, path: str) -> int:
        entry = self.manifest["files"].get(path)
        return int(entry.get("mode", 0o644)) if entry else 0o644


def _gone(job_id: str, what: str) -> InvalidState:
    return InvalidState(
        f"job {job_id}'s code snapshot is no longer stored ({what}): `air gc` removes"
        " snapshots of jobs that ended more than AIR_SNAPSHOT_RETENTION_DAYS ago",
        hint="launch the code again from its commit (`air launch`); raise"
        " AIR_SNAPSHOT_RETENTION_DAYS to keep snapshots longer",
        job_id=job_id,
    )


def read_blob_of(code: JobCode, sha256: str, path: str) -> bytes:
    try:
        return read_blob(code.home, sha256)
    except FileNotFoundError:
        raise _gone(code.job_id, f"the file {path}") from None


def load_job_code(home: Path, job_id: str, code_column: str | None) -> JobCode:
    """The code of ``job_id`` as launched; ``code_column`` is the store's ``code`` value."""
    if not code_column:
        raise NotFound(
            f"job {job_id} ran its live folder (`code: live`): it has no code snapshot",
            hint="only jobs launched with a snapshot (the default) can be rerun, diffed or"
            " exported",
            job_id=job_id,
        )
    record: dict[str, Any] = json.loads(code_column)
    jdir = job_dir(home, job_id)
    try:
        record.update(read_job_json(jdir / CODE_RECORD))
    except (OSError, ValueError, TypeError):  # missing, not a regular file, not a dict
        pass  # the store's column has the digest; the root and cwd are then unknown
    digest = record["digest"]
    if not manifest_path(home, digest).is_file():
        raise _gone(job_id, f"manifest {digest[:12]}")
    code = JobCode(home, job_id, digest, load_manifest(home, digest), record)
    if record.get("patched"):
        try:
            code.patch = read_job_file(jdir / PATCH_FILE).decode("utf-8")
        except (OSError, ValueError):  # missing, a FIFO in its place, not UTF-8
            raise _gone(job_id, "its patch file") from None
        code.overrides = apply_patch(code.patch, code.read)
    return code


def check_blobs(code: JobCode) -> None:
    """Refuse (before anything is launched) a snapshot whose files are not all stored."""
    for path, entry in code.manifest["files"].items():
        if not blob_path(code.home, entry["sha256"]).is_file():
            raise _gone(code.job_id, f"the file {path}")


def rerun_snapshot(code: JobCode) -> Snapshot:
    """The stored snapshot of ``code`` as a ``Snapshot`` to launch again (its provenance too)."""
    check_blobs(code)
    files = code.manifest["files"]
    record = code.record
    return Snapshot(
        digest=code.digest,
        manifest=code.manifest,
        root=code.root or Path(record.get("view") or "."),
        cwd=record.get("cwd") or "",
        mode=record.get("source") or ("git" if code.commit else "folder"),
        git=code.git(),
        files=len(files) + len(code.manifest.get("symlinks", {})),
        bytes=sum(int(f["size"]) for f in files.values()),
        stored=True,
        notes=[f"rerun of {code.job_id}"],
        rerun_of=code.job_id,
    )


def rerun_spec(
    home: Path,
    job_id: str,
    spec: dict[str, Any],
    config: dict[str, Any] | None,
    patch: str | None,
) -> dict[str, Any]:
    """The spec of a rerun of ``job_id``: its stored spec, ``config`` keys over its config,
    ``patch`` (when given) instead of its patch; never its idempotency key."""
    out = {k: v for k, v in spec.items() if k != "idempotency_key" and v is not None}
    if config:
        out["config"] = {**(spec.get("config") or {}), **config}
    if patch is not None:
        out["patch"] = patch
    out["tags"] = {**(spec.get("tags") or {}), "air.rerun_of": job_id}
    workdir = spec.get("workdir")
    if workdir and not Path(workdir).is_dir():
        out.pop("workdir")  # the snapshot runs, not the folder: a moved checkout is no matter
    env = spec.get("env") or {}
    if env and not all(env.values()):
        kept = read_job_env(job_dir(home, job_id)) or {}
        values = {k: v or kept.get(k) or os.environ.get(k) for k, v in env.items()}
        missing = sorted(k for k, v in values.items() if v is None)
        if missing:
            raise InvalidState(
                f"job {job_id}'s environment values for {', '.join(missing)} were deleted when"
                " it ended (they may be secrets)",
                hint=f"export {', '.join(missing)} in this shell and rerun",
                job_id=job_id,
            )
        out["env"] = values
    return out


def ray_working_dir_of(home: Path, job_id: str, code_column: str | None) -> str | None:
    """The shared view a resubmitted Ray job uploads again (None: a ``code: live`` job)."""
    if not code_column:
        return None
    code = load_job_code(home, job_id, code_column)
    check_blobs(code)
    view = shared_view(home, code.digest, code.manifest, code.overrides, code.patch)
    cwd = code.record.get("cwd") or ""
    return str(view / cwd if cwd else view)
