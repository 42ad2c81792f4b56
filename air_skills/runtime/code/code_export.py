"""A job's exact code out of the store: into a folder, or as a commit on a new git branch.

``export_folder`` writes the code as launched (manifest + patch, not what the job later wrote
in its view). ``export_branch`` commits it on a new branch of the user's repository with git
plumbing only: a temporary index (``GIT_INDEX_FILE``), ``hash-object -w``, ``update-index``,
``write-tree``, ``commit-tree`` with the job's base commit as parent, and ``update-ref`` that
refuses an existing branch. The current branch, the index and the working tree are never
touched. Git runs with an argv, never a shell. Stdlib only.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidInput, InvalidSpec, InvalidState
from air_skills.runtime.code.code_source import JobCode
from air_skills.runtime.code.snapshot_files import GIT_TIMEOUT_S, git_binary, git_root
from air_skills.runtime.code.snapshot_store import blob_path, build_view


def export_folder(code: JobCode, dest: Path) -> dict[str, Any]:
    """Write ``code`` into ``dest`` (a new or empty folder); returns what was written."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidInput(
            f"{dest} exists and is not an empty folder: nothing was exported",
            hint="give a new folder (export never overwrites files)",
            path=str(dest),
        )
    method = build_view(code.home, code.manifest, dest, code.overrides)
    return {"job_id": code.job_id, "path": str(dest), "files": len(code.paths()), "copy": method}


def _run(git: str, repo: Path, *args: str, env: dict[str, str] | None = None,
         data: bytes | None = None) -> str:  # fmt: skip
    done = subprocess.run(
        [git, *args],
        cwd=repo,
        input=data,
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise InvalidState(
            f"git {args[0]} failed in {repo}: {os.fsdecode(done.stderr).strip()}: the branch"
            " was not made",
            hint="check the repository (`git status`), then export again",
        )
    return os.fsdecode(done.stdout).strip()


def _repository(code: JobCode, repo: Path | None) -> tuple[str, Path]:
    git = git_binary()
    if git is None:
        raise InvalidState("git is not installed: cannot make a branch",
                           hint="export to a folder instead: air code export JOB DIR")  # fmt: skip
    where = repo or code.root
    top = git_root(git, where) if where is not None and where.is_dir() else None
    if top is None:
        raise InvalidInput(
            f"{where or 'the job'} is not in a git repository: cannot make a branch",
            hint="pass --repo PATH of the repository, or export to a folder",
        )
    return git, top


def check_branch_name(name: str, git: str | None = None) -> None:
    """Refuse a branch name git could not use as one (``HEAD``, ``@``, ``-D``, ``a..b``), or
    that it would read as something else (``refs/heads/main``, ``@{-1}``): invalid-spec."""
    git = git or git_binary()
    if git is None:
        return  # the export itself says git is missing
    checked = None
    if not name.startswith("-") and name not in ("@", "HEAD"):
        done = subprocess.run(
            [git, "check-ref-format", "--branch", name],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        checked = os.fsdecode(done.stdout).strip() if done.returncode == 0 else None
    if checked != name or name.startswith("refs/") or "@{" in name:
        raise InvalidSpec(
            f"{name!r} is not a valid branch name (git check-ref-format --branch): nothing"
            " was exported",
            hint="give a plain new name, e.g. air/job-1234 (not HEAD, @, refs/..., or one"
            " starting with -)",
            branch=name,
        )


def _check_branch(git: str, repo: Path, name: str) -> str:
    check_branch_name(name, git)
    ref = f"refs/heads/{name}"
    exists = subprocess.run(
        [git, "show-ref", "--verify", "--quiet", ref], cwd=repo, check=False
    ).returncode
    if exists == 0:
        raise InvalidInput(
            f"branch {name} already exists in {repo}: nothing was changed",
            hint="give a new branch name (export never moves an existing branch)",
            branch=name,
        )
    return ref


def export_branch(
    code: JobCode, name: str, repo: Path | None = None, message: str | None = None
) -> dict[str, Any]:
    """Commit ``code`` on the new branch ``name`` of ``repo`` (default: the job's repository)."""
    git, top = _repository(code, repo)
    ref = _check_branch(git, top, name)
    parent = code.commit
    if (
        parent
        and subprocess.run(
            [git, "cat-file", "-e", f"{parent}^{{commit}}"], cwd=top, check=False
        ).returncode
    ):
        parent = None  # another repository: the export starts its own history
    with tempfile.TemporaryDirectory(prefix="air-export-") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": os.path.join(tmp, "index")}
        files = sorted(p for p in code.paths() if p not in code.manifest.get("symlinks", {}))
        sources = []
        for i, path in enumerate(files):
            sha = code.sha(path)
            if sha is not None:
                sources.append(str(blob_path(code.home, sha)))
            else:  # patched content exists only in memory
                src = os.path.join(tmp, f"f{i}")
                Path(src).write_bytes(code.read(path) or b"")
                sources.append(src)
        ids = _run(git, top, "hash-object", "-w", "--no-filters", "--stdin-paths",
                   env=env, data="".join(s + "\n" for s in sources).encode()).split()  # fmt: skip
        lines = [
            f"{'100755' if code.mode(p) & 0o111 else '100644'} {oid}\t{p}\0"
            for p, oid in zip(files, ids, strict=True)
        ]
        for path, target in code.manifest.get("symlinks", {}).items():
            if path in code.paths():
                oid = _run(git, top, "hash-object", "-w", "--stdin", env=env, data=target.encode())
                lines.append(f"120000 {oid}\t{path}\0")
        _run(git, top, "update-index", "--add", "-z", "--index-info", env=env,
             data="".join(lines).encode())  # fmt: skip
        tree = _run(git, top, "write-tree", env=env)
    text = message or f"air: code of job {code.job_id} (snapshot {code.digest[:12]}" + (
        ", patched)" if code.patch is not None else ")"
    )
    args = ["commit-tree", tree, "-m", text] + (["-p", parent] if parent else [])
    commit = _run(git, top, *args)
    _run(git, top, "update-ref", ref, commit, "")  # "" as old value: refused if it now exists
    return {"job_id": code.job_id, "repo": str(top), "branch": name, "commit": commit,
            "parent": parent, "files": len(lines)}  # fmt: skip
