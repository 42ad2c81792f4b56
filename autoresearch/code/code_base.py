"""A code study's base: the snapshot taken once when the study starts, and its files.

The base is journaled (``code_base`` event: digest, where it came from, the editable files and
the protected files' digests), so a resumed loop uses the same one. Trials never run the
user's tree: each launch carries one patch that turns the tree's current snapshot into the
base plus the trial's patch chain (usually just the chain, when the tree has not changed).

A study with ``base_job`` starts from that job's code instead: its stored snapshot plus its
patch (``base_patch`` in the record) is the base the trials' patches apply to, and each
trial's launch patch is the base patch and its chain composed, against that snapshot
(``Client.launch_on`` runs it on the job's snapshot, never the tree).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidSpec
from air_skills.runtime.code.code_source import JobCode, load_job_code
from air_skills.runtime.code.patch import apply_patch, check_layout
from air_skills.runtime.code.snapshot import load_manifest, read_blob, take_snapshot
from air_skills.runtime.code.snapshot_files import IgnoreRules
from autoresearch.code.code_diff import unified_diff
from autoresearch.spec.study_schema import Study
from autoresearch.spec.study_sections import CodeSection

Files = dict[str, bytes | None]  # path -> content (None: deleted), over the base


def matches(globs: list[str], path: str) -> bool:
    """Whether ``path`` (relative, POSIX) matches one of the .gitignore-style ``globs``."""
    return bool(globs) and IgnoreRules(globs).ignored(path)


def _editable(code: CodeSection, files: list[str], of: str, fits: str, holds: str) -> list[str]:
    """The editable files among ``files`` (protected ones excluded); a glob of the code
    section that matches none of them is refused, each named (``of``: where it looked)."""
    problems = [
        f"code.{kind}: {g!r} matches no file of {of}"
        for kind, globs in (("editable", code.editable), ("protected", code.protected))
        for g in globs
        if not any(matches([g], p) for p in files)
    ]
    if problems:
        raise InvalidSpec(
            f"the study's code section does not fit {fits}:",
            problems=problems,
            hint="globs use .gitignore syntax from the tree's root (e.g. `train.py`,"
            f" `src/**/*.py`); {holds} {len(files)} files",
        )
    return [p for p in files if matches(code.editable, p) and not matches(code.protected, p)]


class CodeBase:
    """The study's base snapshot: read its files, apply patch chains, check protected files."""

    def __init__(self, home: Path, record: dict[str, Any]) -> None:
        self.home = Path(home)
        self.record = record
        self.digest: str = record["digest"]
        self.manifest = load_manifest(self.home, self.digest)
        self.editable: list[str] = list(record.get("editable", []))
        self.protected: dict[str, str] = dict(record.get("protected", {}))
        self.section = CodeSection.model_validate(record["code"])
        # a base job's patch over its snapshot: the base's files that differ from the manifest
        patch = record.get("base_patch")
        self.base_files: Files = apply_patch(patch, self._stored) if patch else {}

    # --- taking it ---

    @classmethod
    def take(cls, home: Path, study: Study, job: JobCode | None = None) -> CodeBase:
        """Snapshot the study's workdir now (or, with ``job``, the base job's code as it
        launched: its snapshot and patch); refuse globs that match nothing."""
        assert study.code is not None
        if job is not None:
            return cls._of_job(home, study, job)
        snap = take_snapshot(home, study.workdir)
        files = sorted(snap.manifest["files"])
        code = study.code
        editable = _editable(
            code, files, f"the snapshot of {snap.root}", "its tree", "the snapshot holds"
        )
        protected = {
            p: snap.manifest["files"][p]["sha256"] for p in files if matches(code.protected, p)
        }
        git = snap.git
        record = {
            "digest": snap.digest,
            "root": str(snap.root),
            "cwd": snap.cwd,
            "mode": snap.mode,
            "commit": git.commit if git else None,
            "branch": git.branch if git else None,
            "dirty": bool(git and git.dirty),
            "editable": editable,
            "protected": protected,
            "code": code.model_dump(mode="json"),
        }
        return cls(home, record)

    @classmethod
    def _of_job(cls, home: Path, study: Study, job: JobCode) -> CodeBase:
        """The base of a ``base_job`` study: the job's snapshot plus its patch."""
        assert study.code is not None
        code = study.code
        files = sorted(p for p in job.paths() if p not in job.manifest.get("symlinks", {}))
        editable = _editable(
            code, files, f"job {job.job_id}'s code", "its base job's code", "the job's code holds"
        )
        protected = {}
        for p in files:
            if matches(code.protected, p):
                protected[p] = job.sha(p) or hashlib.sha256(job.read(p) or b"").hexdigest()
        git = job.git()
        record = {
            "digest": job.digest,
            "root": str(job.root or job.record.get("view") or "."),
            "cwd": job.record.get("cwd") or "",
            "mode": job.record.get("source") or ("git" if job.commit else "folder"),
            "commit": job.commit,
            "branch": git.branch if git else None,
            "dirty": bool(git and git.dirty),
            "editable": editable,
            "protected": protected,
            "code": code.model_dump(mode="json"),
            "base_job": job.job_id,
            "base_patch": job.patch,
        }
        return cls(home, record)

    # --- files ---

    def _stored(self, path: str) -> bytes | None:
        """A file of the stored snapshot, without the base job's patch."""
        entry = self.manifest["files"].get(path)
        return None if entry is None else read_blob(self.home, entry["sha256"])

    def read(self, path: str) -> bytes | None:
        """A file of the base (the base job's patch applied)."""
        return self.base_files[path] if path in self.base_files else self._stored(path)

    def apply_chain(self, patches: list[str]) -> Files:
        """The files the patches (root first) change, over the base."""
        state: Files = {}
        for text in patches:

            def read(path: str, state: Files = state) -> bytes | None:
                return state[path] if path in state else self.read(path)

            state.update(apply_patch(text, read))
        check_layout(state, self.manifest["files"], self.manifest.get("symlinks", {}))
        return state

    def composed(self, patches: list[str]) -> str | None:
        """One patch against the base equal to the chain ``patches`` (None: no change)."""
        return self._diff(self.apply_chain(patches), self.read) or None

    def over_snapshot(self, patches: list[str]) -> tuple[Files, str | None]:
        """(the files that differ from the stored snapshot, as one patch): the base's own
        patch (a base job's) and the chain ``patches`` over it."""
        files = {**self.base_files, **self.apply_chain(patches)}
        return files, self._diff(files, self._stored) or None

    def launch_patch(self, patches: list[str]) -> tuple[str | None, list[str]]:
        """(the patch to launch with from the user's tree as it is now, notes): the tree's
        current snapshot turned into the base plus the chain ``patches``. On a base job's
        code: the base patch and the chain as one patch against the job's snapshot."""
        final = self.apply_chain(patches)
        if self.record.get("base_job"):
            return self.over_snapshot(patches)[1], []
        snap = take_snapshot(self.home, self.record["root"])
        if snap.digest == self.digest:
            return self._diff(final, self.read) or None, []
        now = snap.manifest["files"]
        base = self.manifest["files"]
        changed = {p for p in set(now) | set(base) if (now.get(p) or {}).get("sha256")
                   != (base.get(p) or {}).get("sha256")}  # fmt: skip
        target = {p: final[p] if p in final else self.read(p) for p in changed | set(final)}

        def current(path: str) -> bytes | None:
            entry = now.get(path)
            return None if entry is None else read_blob(self.home, entry["sha256"])

        notes = [f"the tree changed since the study started ({len(changed)} files): trials"
                 " still run the study's base"]  # fmt: skip
        text, skipped = self._diff_with_skips(target, current)
        if skipped:
            notes.append("binary files differ from the base and run as they are now: "
                         + ", ".join(skipped[:5]))  # fmt: skip
        return text or None, notes

    def _diff(self, target: Files, read: Any) -> str:
        text, _ = self._diff_with_skips(target, read)
        return text

    @staticmethod
    def _diff_with_skips(target: Files, read: Any) -> tuple[str, list[str]]:
        parts: list[str] = []
        skipped: list[str] = []
        for path in sorted(target):
            before, after = read(path), target[path]
            if before == after:
                continue
            try:
                parts.append(unified_diff(path, before, after))
            except ValueError:
                skipped.append(path)
        return "".join(parts), skipped

    # --- protected files ---

    def tampered(self, view: Path) -> list[str]:
        """Protected files whose content in a job's code view differs from the base."""
        out = []
        for path, sha in sorted(self.protected.items()):
            try:
                with open(view / path, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
            except OSError:
                digest = None  # removed or replaced by something unreadable
            if digest != sha:
                out.append(path)
        return out

    def view_of(self, job_id: str) -> Path:
        """A job's code view (its private copy of the tree, see job_code)."""
        return self.home / "jobs" / job_id / "code"

    def build_base_view(self, dest: Path) -> Path:
        """The base's own files in ``dest`` (for the trusted evaluator); the cwd inside it."""
        from air_skills.runtime.code.snapshot import build_view

        build_view(self.home, self.manifest, dest, self.base_files)
        cwd = dest / self.record["cwd"] if self.record["cwd"] else dest
        os.makedirs(cwd, exist_ok=True)
        return cwd


def base_job_code(client: Any, job_id: str) -> JobCode:
    """The code ``job_id`` ran (its snapshot and patch), a ``base_job`` study's base."""
    info = client.get(job_id)  # NotFound names the id, with where ids come from
    home = Path(getattr(client, "home", None) or client.runtime.home)
    return load_job_code(home, info.job_id, client.store.row(info.job_id).code)


def patch_digest(patch: str | None, parent: int | None) -> str:
    """What makes two code trials' code the same, for the duplicate check."""
    if patch is None and parent is None:
        return ""
    return hashlib.sha256(f"{parent}\n{patch or ''}".encode()).hexdigest()[:16]
