"""`air skills install`: the bundled agent skills, checked and copied where agents find them.

The copy is atomic: a failure leaves every installed skill as it was. The MCP config entry for
the same agents is ``air_skills.integrations.mcp_config``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidInput, InvalidState
from air_skills.integrations.dirs import make_dirs, remove_dirs

MANIFEST = ".air-skills.json"  # per installed skill: what we wrote, to tell local edits apart

# target -> (user folder under HOME, project folder under the project root)
SKILL_TARGETS: dict[str, tuple[str, str]] = {
    "claude": (".claude/skills", ".claude/skills"),
    "cursor": (".cursor/skills", ".cursor/skills"),
    "codex": (".agents/skills", ".agents/skills"),
}


# --- the bundled skills ------------------------------------------------------------------------


def skills_root() -> Traversable:
    """The skills shipped as package data: ``air_skills/skills/<name>/SKILL.md``."""
    return resources.files("air_skills") / "skills"


def bundled_skills() -> dict[str, dict[str, bytes]]:
    """Every bundled skill: name -> {relative path: content}, SKILL.md and references/."""
    out: dict[str, dict[str, bytes]] = {}
    for folder in sorted(skills_root().iterdir(), key=lambda t: t.name):
        if not folder.is_dir() or not folder.joinpath("SKILL.md").is_file():
            continue
        files: dict[str, bytes] = {}
        _collect(folder, "", files)
        out[folder.name] = files
    return out


def _collect(node: Traversable, prefix: str, files: dict[str, bytes]) -> None:
    for child in sorted(node.iterdir(), key=lambda t: t.name):
        if child.name.startswith(".") or child.name == "__pycache__":
            continue
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            _collect(child, rel + "/", files)
        else:
            files[rel] = child.read_bytes()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the Agent Skills specification's limits ----------------------------------------------------

SKILL_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SKILL_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500
MAX_BODY_LINES = 500
_LINK_RE = re.compile(r"\]\(([^)\s]+)\)")


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """(frontmatter mapping, body) of a SKILL.md; ValueError when there is no valid one."""
    import yaml

    if not text.startswith("---\n"):
        raise ValueError("SKILL.md must start with a '---' line opening the YAML frontmatter")
    end = text.find("\n---\n", 3)
    if end < 0:
        raise ValueError("the frontmatter is not closed by a '---' line")
    try:
        meta = yaml.safe_load(text[4 : end + 1])
    except yaml.YAMLError as exc:
        raise ValueError(f"the frontmatter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise ValueError("the frontmatter must be a mapping of fields")
    return meta, text[end + 5 :]


def check_skill(folder: Path | Traversable) -> list[str]:
    """Every way the skill in ``folder`` breaks the Agent Skills specification (empty if none).

    Frontmatter: ``name`` (lowercase letters, digits and single hyphens, at most 64 characters,
    equal to the folder's name) and ``description`` (at most 1024 characters) required; only
    the spec's fields. Body: under 500 lines. Links to ``references/`` resolve, and references
    sit one level deep.
    """
    problems: list[str] = []
    skill_md = folder.joinpath("SKILL.md")
    if not skill_md.is_file():
        return [f"{folder.name}: no SKILL.md"]
    try:
        meta, body = split_frontmatter(skill_md.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return [f"{folder.name}/SKILL.md: {exc}"]
    where = f"{folder.name}/SKILL.md"
    for key in meta:
        if key not in SKILL_FIELDS:
            problems.append(f"{where}: unknown frontmatter field {key!r}")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: 'name' is required (a string)")
    else:
        if len(name) > MAX_NAME_CHARS:
            problems.append(f"{where}: 'name' has {len(name)} characters (at most 64)")
        if not SKILL_NAME_RE.match(name):
            problems.append(
                f"{where}: 'name' {name!r} must be lowercase letters, digits and single hyphens,"
                " not starting or ending with a hyphen"
            )
        if name != folder.name:
            problems.append(f"{where}: 'name' {name!r} differs from its folder {folder.name!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append(f"{where}: 'description' is required (what it does, when to use it)")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        problems.append(f"{where}: 'description' has {len(description)} characters (at most 1024)")
    compatibility = meta.get("compatibility")
    if compatibility is not None and (
        not isinstance(compatibility, str) or not 1 <= len(compatibility) <= MAX_COMPATIBILITY_CHARS
    ):
        problems.append(f"{where}: 'compatibility' must be a string of 1-500 characters")
    metadata = meta.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        problems.append(f"{where}: 'metadata' must map strings to strings")
    for key in ("license", "allowed-tools"):
        if key in meta and not isinstance(meta[key], str):
            problems.append(f"{where}: {key!r} must be a string")
    lines = body.count("\n") + (0 if body.endswith("\n") else 1)
    if not body.strip():
        problems.append(f"{where}: the body is empty")
    elif lines >= MAX_BODY_LINES:
        problems.append(f"{where}: the body has {lines} lines (keep it under 500)")
    for target in _LINK_RE.findall(body):
        if "://" in target or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not folder.joinpath(*path.split("/")).is_file():
            problems.append(f"{where}: link to {target!r}, which does not exist")
    refs = folder.joinpath("references")
    if refs.is_dir():
        for child in refs.iterdir():
            if child.is_dir():
                problems.append(
                    f"{folder.name}/references/{child.name}: references sit one level deep"
                )
    return problems


# --- air skills install ------------------------------------------------------------------------


def skills_dir(target: str, project: bool = False, cwd: Path | None = None) -> Path:
    """The folder that receives the skills for ``target`` (claude | cursor | codex | DIR)."""
    if target in SKILL_TARGETS:
        user_rel, project_rel = SKILL_TARGETS[target]
        if project:
            return (cwd or Path.cwd()).absolute() / project_rel
        return Path.home() / user_rel
    looks_like_path = (
        os.sep in target
        or "/" in target
        or target.startswith((".", "~"))
        or (os.altsep is not None and os.altsep in target)
    )
    if not target.strip() or not looks_like_path:
        raise InvalidInput(
            f"unknown skills target {target!r}",
            code="unknown-target",
            hint="use claude, cursor or codex, or a folder path such as ./skills or ~/my-skills",
            valid_keys=[*SKILL_TARGETS, "DIR"],
        )
    if project:
        raise InvalidInput(
            "--project applies to the named targets (claude, cursor, codex), not to a folder",
            code="invalid-input",
            hint=f"drop --project, or use --target claude --project (folder: {target})",
        )
    return (cwd or Path.cwd()) / Path(target).expanduser()


def _installed_state(dest: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    """What an installed skill folder holds now, and what our manifest says we wrote there."""
    current: dict[str, bytes] = {}
    recorded: dict[str, str] = {}
    if not dest.is_dir():
        return current, recorded
    try:
        data = json.loads((dest / MANIFEST).read_text())
        if isinstance(data, dict) and isinstance(data.get("files"), dict):
            recorded = {str(k): str(v) for k, v in data["files"].items()}
    except (OSError, ValueError):
        pass
    for path in dest.rglob("*"):
        if path.is_file() and path.name != MANIFEST:
            try:
                current[path.relative_to(dest).as_posix()] = path.read_bytes()
            except OSError:
                continue
    return current, recorded


def _plan_skill(
    name: str, files: dict[str, bytes], dest: Path
) -> tuple[list[dict[str, str]], list[str], bool]:
    """Per file: created | updated | unchanged | modified (local edits). Returns the rows,
    the conflicting paths, and whether the folder needs writing at all."""
    if (dest.exists() or dest.is_symlink()) and not dest.is_dir():
        rows = [{"action": "modified", "path": str(dest / rel), "skill": name} for rel in files]
        return rows, [f"{dest} (not a skill folder)"], True
    current, recorded = _installed_state(dest)
    rows: list[dict[str, str]] = []
    conflicts: list[str] = []
    for rel, content in files.items():
        path = dest / rel
        if rel not in current:
            action = "created"
        elif current[rel] == content:
            action = "unchanged"
        elif recorded.get(rel) == _sha(current[rel]):
            action = "updated"  # ours, untouched since we wrote it: safe to refresh
        else:
            action = "modified"
            conflicts.append(str(path))
        rows.append({"action": action, "path": str(path), "skill": name})
    wanted_manifest = {rel: _sha(c) for rel, c in files.items()}
    needs_write = any(r["action"] != "unchanged" for r in rows) or recorded != wanted_manifest
    return rows, conflicts, needs_write


def _manifest_bytes(files: dict[str, bytes]) -> bytes:
    from air_skills import __version__

    data = {
        "installed_by": f"air-skills {__version__}",
        "note": "air skills install refreshes these files only while they match these digests",
        "files": {rel: _sha(c) for rel, c in sorted(files.items())},
    }
    return (json.dumps(data, indent=1) + "\n").encode()


def _not_writable(where: Path, exc: BaseException) -> AirError:
    reason = getattr(exc, "strerror", None) or str(exc)
    return AirError(
        f"cannot write skills to {where}: {reason}; nothing was changed",
        code="target-not-writable",
        hint="choose a writable folder with --target DIR, or fix the folder's permissions",
        path=str(where),
    )


def install_skills(
    target: str = "claude",
    project: bool = False,
    force: bool = False,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """Copy the bundled skills into ``target``'s skills folder and list what was written.

    A file changed since we installed it (or not ours) is never overwritten without ``force``:
    the call raises ``skill-modified`` listing every such file and writes nothing. Each skill
    folder is built complete in a temporary folder beside it and renamed into place, so an
    error leaves the target as it was.
    """
    dest_root = skills_dir(target, project=project, cwd=cwd)
    bundle = bundled_skills()
    if not bundle:
        raise AirError(
            "no skills found in the installed package (air_skills/skills is empty)",
            code="skills-missing",
            hint="reinstall air-skills: pip install --force-reinstall air-skills",
        )
    rows: list[dict[str, str]] = []
    conflicts: list[str] = []
    to_write: list[str] = []
    for name, files in bundle.items():
        skill_rows, skill_conflicts, needs_write = _plan_skill(name, files, dest_root / name)
        rows += skill_rows
        conflicts += skill_conflicts
        if needs_write:
            to_write.append(name)
    if conflicts and not force:
        raise InvalidState(
            f"{len(conflicts)} installed skill file(s) have local edits: "
            + ", ".join(conflicts)
            + "; nothing was written",
            code="skill-modified",
            hint="keep your edits elsewhere and rerun with --force to overwrite them,"
            " or install into another folder with --target DIR",
            files=conflicts,
        )
    for row in rows:
        if row["action"] == "modified":
            row["action"] = "replaced"
    result = {
        "target": target,
        "dir": str(dest_root),
        "skills": sorted(bundle),
        "files": [{"action": r["action"], "path": r["path"]} for r in rows],
    }
    if not to_write:
        return result
    _write_skills(dest_root, {n: bundle[n] for n in to_write})
    return result


def _write_skills(dest_root: Path, skills: dict[str, dict[str, bytes]]) -> None:
    try:
        created = make_dirs(dest_root)
    except OSError as exc:
        raise _not_writable(dest_root, exc) from None
    staging: Path | None = None
    swapped: list[tuple[Path, Path | None]] = []  # (installed folder, the old one set aside)
    try:
        staging = Path(tempfile.mkdtemp(prefix=".air-skills-", dir=dest_root))
        for name, files in skills.items():
            stage = staging / name
            dest = dest_root / name
            if dest.is_dir():
                # keep whatever else the user put in the folder
                shutil.copytree(dest, stage, symlinks=True)
            else:
                stage.mkdir()
            for rel, content in files.items():
                path = stage / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_symlink() or path.is_dir():
                    _remove(path)
                path.write_bytes(content)
            (stage / MANIFEST).write_bytes(_manifest_bytes(files))
        for name in skills:
            dest = dest_root / name
            old: Path | None = None
            if dest.exists() or dest.is_symlink():
                old = staging / f".old-{name}"
                os.rename(dest, old)
            try:
                os.rename(staging / name, dest)
            except OSError:
                if old is not None:
                    os.rename(old, dest)
                raise
            swapped.append((dest, old))
    except OSError as exc:
        for dest, old in reversed(swapped):
            try:
                _remove(dest)
                if old is not None:
                    os.rename(old, dest)
            except OSError:
                pass
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        remove_dirs(created)
        raise _not_writable(dest_root, exc) from None
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
