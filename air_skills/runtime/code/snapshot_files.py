"""Which files a code snapshot holds: git's list, or a plain folder's minus ``.airignore``.

In a git work tree: ``git ls-files -co --exclude-standard`` from the repository's root (tracked
plus untracked-but-not-ignored files; submodules are listed the same way, recursively, and
their files included). In a plain folder (or when ``git`` is not installed): every file minus
``.git``, ``__pycache__`` and virtualenvs (a folder holding ``pyvenv.cfg``). In both modes the
patterns of a ``.airignore`` file at the root (gitignore syntax, common subset) are left out,
and so is every study folder (a folder holding a study journal beside its study or loop file):
a growing journal must not change every later job's code. Stdlib only; git is run with an
argv, never a shell.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SKIP_DIRS = frozenset({".git", "__pycache__"})
GIT_TIMEOUT_S = 60.0
# autoresearch's study folder: its journal beside one of the others (autoresearch/study/folder.py)
STUDY_JOURNAL = "journal.jsonl"
STUDY_MARKERS = ("study.yaml", "loop.json", ".loop.lock", ".start.yaml")


def is_study_folder(folder: str | Path) -> bool:
    """Whether ``folder`` holds a study's journal (and its study or loop file)."""
    try:
        return os.path.isfile(os.path.join(folder, STUDY_JOURNAL)) and any(
            os.path.exists(os.path.join(folder, m)) for m in STUDY_MARKERS
        )
    except OSError:
        return False


def without_study_folders(root: Path, paths: list[str]) -> list[str]:
    """``paths`` (relative to ``root``) minus those inside a study folder."""
    studies = {
        p[: -len(STUDY_JOURNAL)]  # "studies/x/": a folder below the root, never the root
        for p in paths
        if p.endswith("/" + STUDY_JOURNAL) and is_study_folder(root / os.path.dirname(p))
    }
    if not studies:
        return paths
    return [p for p in paths if not any(p.startswith(s) for s in studies)]


@dataclass
class GitInfo:
    """Where a git snapshot came from: HEAD's commit and branch, the remote, dirty or not."""

    commit: str | None = None
    branch: str | None = None
    repo_url: str | None = None
    dirty: bool = False


@dataclass
class Listing:
    """The files (relative POSIX paths) of a tree and how they were found."""

    root: Path  # the snapshot's root: the repository's top level, or the plain folder
    paths: list[str]
    mode: str  # "git" | "folder"
    git: GitInfo | None = None
    notes: list[str] = field(default_factory=list)


# --- .airignore -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _glob_to_regex(pattern: str, anchored: bool) -> str:
    """One gitignore pattern (no leading ``!``/``/``, no trailing ``/``) as a regex."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    prefix = "" if anchored else "(?:.*/)?"
    return "^" + prefix + "".join(out) + "$"


class IgnoreRules:
    """gitignore's common subset: ``*``, ``?``, ``**``, ``/`` anchoring, trailing ``/``, ``!``.

    A path is ignored when the last rule matching it (or one of its parent folders) ignores it.
    As in git, a file inside an ignored folder stays ignored even if a later ``!`` names it.
    """

    def __init__(self, lines: list[str]) -> None:
        self.rules: list[_Rule] = []
        for raw in lines:
            line = raw.rstrip("\n").rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            line = line.rstrip(" ") if not line.endswith("\\ ") else line
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            elif line.startswith("\\!") or line.startswith("\\#"):
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            anchored = "/" in line  # a slash at the start or in the middle anchors it
            line = line.lstrip("/")
            self.rules.append(_Rule(re.compile(_glob_to_regex(line, anchored)), negate, dir_only))

    @classmethod
    def load(cls, root: Path) -> IgnoreRules:
        try:
            return cls((root / ".airignore").read_text(encoding="utf-8").splitlines())
        except (FileNotFoundError, NotADirectoryError):
            return cls([])

    def _match(self, path: str, is_dir: bool) -> bool | None:
        verdict = None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(path):
                verdict = not rule.negate
        return verdict

    def ignored(self, path: str, is_dir: bool = False) -> bool:
        """Whether ``path`` (relative, POSIX) is left out, its parent folders included."""
        if not self.rules:
            return False
        parts = path.split("/")
        for i in range(1, len(parts)):
            if self._match("/".join(parts[:i]), True):
                return True
        return bool(self._match(path, is_dir))


# --- listing ----------------------------------------------------------------------------------


def git_binary() -> str | None:
    """The ``git`` on PATH, or None (then snapshots use plain-folder mode)."""
    return shutil.which("git")


def _git(git: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [git, *args],
        cwd=cwd,
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def git_root(git: str, folder: Path) -> Path | None:
    """The top level of the git work tree holding ``folder``, or None outside one."""
    done = _git(git, folder, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        return None
    return Path(os.fsdecode(done.stdout.strip()))


def _git_files(git: str, root: Path, prefix: str = "") -> list[str]:
    done = _git(git, root, "ls-files", "-co", "--exclude-standard", "-z")
    if done.returncode != 0:
        raise OSError(f"git ls-files failed in {root}: {os.fsdecode(done.stderr).strip()}")
    out: list[str] = []
    for raw in sorted(set(done.stdout.split(b"\0"))):
        if not raw:
            continue
        rel = os.fsdecode(raw)
        full = root / rel
        if full.is_dir() and not full.is_symlink():  # a submodule (gitlink): list its files too
            if (full / ".git").exists():
                out.extend(_git_files(git, full, f"{prefix}{rel}/"))
            continue
        out.append(prefix + rel)
    return out


def git_info(git: str, root: Path) -> GitInfo:
    """HEAD's commit and branch, the remote's URL (origin first) and whether the tree is dirty."""
    info = GitInfo()
    done = _git(git, root, "status", "--porcelain=v2", "--branch", "-z")
    if done.returncode == 0:
        for entry in done.stdout.split(b"\0"):
            text = os.fsdecode(entry)
            if text.startswith("# branch.oid "):
                oid = text.split(" ", 2)[2]
                info.commit = None if oid == "(initial)" else oid
            elif text.startswith("# branch.head "):
                head = text.split(" ", 2)[2]
                info.branch = None if head == "(detached)" else head
            elif text and not text.startswith("#"):
                info.dirty = True
    remotes = _git(git, root, "config", "--get-regexp", r"^remote\..*\.url$")
    urls = {}
    for line in os.fsdecode(remotes.stdout).splitlines():
        key, _, url = line.partition(" ")
        urls[key] = url.strip()
    if urls:
        info.repo_url = urls.get("remote.origin.url") or urls[sorted(urls)[0]]
    return info


def dirty_diff(root: Path) -> str:
    """``git diff HEAD`` of the tracked files ("" outside git or without a commit)."""
    git = git_binary()
    if git is None:
        return ""
    done = _git(git, root, "diff", "HEAD", "--no-color", "--no-ext-diff")
    return os.fsdecode(done.stdout) if done.returncode == 0 else ""


def _folder_files(root: Path, rules: IgnoreRules, skip: frozenset[str]) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        keep = []
        for d in dirnames:
            full = os.path.join(dirpath, d)
            if os.path.islink(full):  # a symlinked folder is an entry, never walked into
                if not rules.ignored(rel_dir + d):
                    out.append(rel_dir + d)
                continue
            if d in SKIP_DIRS or rules.ignored(rel_dir + d, True) or full in skip:
                continue
            if is_study_folder(full):
                continue
            try:
                if os.path.exists(os.path.join(full, "pyvenv.cfg")):
                    continue  # a virtualenv
            except OSError:
                continue
            keep.append(d)
        dirnames[:] = sorted(keep)
        out.extend(rel_dir + f for f in filenames if not rules.ignored(rel_dir + f))
    return sorted(out)


def list_files(workdir: Path, skip: frozenset[str] = frozenset()) -> Listing:
    """The files of the tree ``workdir`` belongs to (see the module docstring); a plain
    folder's walk does not enter the folders in ``skip`` (real paths, e.g. AIR_HOME)."""
    rules = IgnoreRules.load(workdir)
    git = git_binary()
    notes: list[str] = []
    if git is None:
        notes.append(
            "git was not found on PATH: plain-folder snapshot (every file minus .git,"
            " __pycache__, virtualenvs and .airignore patterns)"
        )
    else:
        root = git_root(git, workdir)
        if root is not None:
            root = root.resolve()
            rules = IgnoreRules.load(root)
            paths = [p for p in _git_files(git, root) if not rules.ignored(p)]
            paths = without_study_folders(root, paths)
            return Listing(root, paths, "git", git_info(git, root), notes)
    return Listing(workdir, _folder_files(workdir, rules, skip), "folder", None, notes)
