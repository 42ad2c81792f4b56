"""Governed data inputs: checked against AIR_DATA_ROOTS, given to the job, fingerprinted.

A job's ``data`` is a list of ``{name, path}``. At launch each path is resolved to its real
path (symlinks and ``..`` followed) and compared component by component with the real paths
of the roots in ``AIR_DATA_ROOTS`` (an ``os.pathsep`` list); a path outside them, a missing
path, or a folder holding a symlink that leads outside them is refused before anything is
created. With ``AIR_DATA_ROOTS`` unset, every data input is refused (there is no implicit
root: a job's workdir is whatever the caller says, so it cannot be a boundary).

Each input is fingerprinted (``air_skills.tracking.fingerprint``). The job gets
``$AIR_DATA_DIR/<name>``, a symlink to the real path; the digest and source go to its MLflow
run as a dataset input; at exit the inputs are re-checked (metadata first, content within a
bound of bytes and time) and a change is reported in the job's message. Plain values only
(no pydantic): the supervisor imports this module.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import DataPathRefused, InvalidInput, TrackingUnavailable
from air_skills.tracking.fingerprint import Budget, fingerprint, recent, recheck

ROOTS_ENV = "AIR_DATA_ROOTS"
CONTEXT_TAG = "mlflow.data.context"


@dataclass(frozen=True)
class ResolvedInput:
    name: str
    path: str  # as given
    real: str  # the real path: symlinks and ``..`` resolved


# --- roots and resolution --------------------------------------------------------------------


def allowed_roots(value: str | None = None) -> list[Path]:
    """The real paths of the roots in ``AIR_DATA_ROOTS`` (or ``value``); relative entries are
    taken from the current folder, empty entries ignored."""
    raw = (settings.get(ROOTS_ENV) or "") if value is None else value
    roots: list[Path] = []
    for entry in raw.split(os.pathsep):
        entry = entry.strip()
        if not entry:
            continue
        real = Path(os.path.realpath(os.path.expanduser(entry)))
        if real not in roots:
            roots.append(real)
    return roots


def is_under(path: str | Path, roots: Iterable[Path]) -> bool:
    """Whether ``path`` (a real path) is one of ``roots`` or inside one, by whole components."""
    parts = Path(path).parts
    return any(parts[: len(r.parts)] == r.parts for r in roots)


def _roots_text(roots: list[Path]) -> str:
    return ", ".join(str(r) for r in roots) if roots else f"none ({ROOTS_ENV} is not set)"


def _refuse(problems: list[str], roots: list[Path]) -> DataPathRefused:
    if roots:
        hint = (
            "put (or link) the data under one of the allowed roots, or add its folder to"
            f" {ROOTS_ENV} ({os.pathsep}-separated), then relaunch"
        )
    else:
        hint = (
            f"set {ROOTS_ENV} to the folders that hold your data (e.g. export"
            f" {ROOTS_ENV}=/data{os.pathsep}/scratch/datasets), then relaunch"
        )
    exc = DataPathRefused(
        f"data inputs refused, nothing launched (allowed roots: {_roots_text(roots)}): "
        + "; ".join(problems),
        hint=hint,
        problems=problems,
        roots=[str(r) for r in roots],
    )
    exc.problems = problems  # type: ignore[attr-defined]  # listed one per line by the CLI
    return exc


def _field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)


def resolve_inputs(
    data: Iterable[Any],
    workdir: str | os.PathLike[str] | None = None,
    roots: list[Path] | None = None,
    deep: bool = True,
) -> list[ResolvedInput]:
    """Resolve every input and check it against the roots; raise one DataPathRefused that
    lists every problem. Relative paths are taken from ``workdir`` (default: the current
    folder). With ``deep``, the symlinks inside a folder are checked too."""
    roots = allowed_roots() if roots is None else roots
    base = Path(workdir) if workdir else Path.cwd()
    problems: list[str] = []
    out: list[ResolvedInput] = []
    for item in data:
        name, path = str(_field(item, "name")), str(_field(item, "path"))
        problem = _check_one(name, path, base, roots, out, deep)
        if problem:
            problems.append(problem)
    if problems:
        raise _refuse(problems, roots)
    return out


def _check_one(
    name: str, path: str, base: Path, roots: list[Path], out: list[ResolvedInput], deep: bool
) -> str | None:
    if "\x00" in path:
        return f"{name}: the path holds a NUL byte"
    given = base / os.path.expanduser(path)
    lexical = os.path.normpath(given)
    try:
        real = os.path.realpath(given, strict=True)
    except FileNotFoundError:
        return f"{name}: {path} does not exist"
    except OSError as exc:  # a symlink loop, a component that is not a folder, no permission
        return f"{name}: {path} cannot be resolved ({exc.strerror or exc})"
    if not roots:
        return f"{name}: {path} refused ({ROOTS_ENV} is not set)"
    if not is_under(real, roots):
        how = "" if real == lexical else f" resolves to {real} (through a symlink or '..') and"
        return f"{name}: {path}{how} is outside the allowed roots"
    mode = os.stat(real).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return f"{name}: {path} is neither a file nor a folder"
    if deep and stat.S_ISDIR(mode):
        escape = _find_escape(real, roots)
        if escape:
            return f"{name}: {path} holds a symlink {escape}, outside the allowed roots"
    out.append(ResolvedInput(name=name, path=path, real=real))
    return None


def _find_escape(folder: str, roots: list[Path]) -> str | None:
    """The first symlink under ``folder`` whose target lies outside the roots, as text."""
    stack = [folder]
    seen = {folder}
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue  # unreadable folders are reported when the fingerprint reads them
        for entry in entries:
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                if not is_under(target, roots):
                    return f"{os.path.relpath(entry.path, folder)} -> {target}"
                if os.path.isdir(target) and target not in seen:
                    seen.add(target)
                    stack.append(target)
            elif entry.is_dir(follow_symlinks=False) and entry.path not in seen:
                seen.add(entry.path)
                stack.append(entry.path)
    return None


# --- launch: prepare, link, log ------------------------------------------------------------------


def prepare_inputs(
    data: Iterable[Any], home: Path | None, workdir: str | os.PathLike[str] | None = None
) -> list[dict[str, str]]:
    """Resolve, check and fingerprint every input; returns ``{name, path, digest}`` dicts with
    real paths (the caller makes them ``DataInput``s: this module stays pydantic-free).

    An input given with a ``digest`` is refused unless the data still has it (a prefix of the
    digest is enough): a relaunch can pin the exact version of its data.
    """
    items = list(data)
    resolved = resolve_inputs(items, workdir)
    out: list[dict[str, str]] = []
    mismatches: list[str] = []
    for item, res in zip(items, resolved, strict=True):
        fp = fingerprint(res.real, home)
        pinned = _field(item, "digest")
        if pinned and not fp.digest.startswith(pinned):
            mismatches.append(f"{res.name}: {res.real} is now {fp.digest}, not {pinned}")
        out.append({"name": res.name, "path": res.real, "digest": fp.digest})
    if mismatches:
        raise InvalidInput(
            "data inputs changed since their pinned digest, nothing launched: "
            + "; ".join(mismatches),
            code="data-digest-mismatch",
            hint="drop the digest to use the data as it is now, or restore that version",
            problems=mismatches,
        )
    return out


def link_inputs(data: Iterable[Any], data_dir: Path, workdir: str | None = None) -> None:
    """Expose each input at ``data_dir/<name>``: a symlink to its real path (checked again)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for res in resolve_inputs(data, workdir, deep=False):  # deep-checked by prepare_inputs
        link = data_dir / res.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(res.real, target_is_directory=os.path.isdir(res.real))


def log_inputs(tracker: Any, run_id: str, data: Iterable[Any], context: str = "input") -> None:
    """Log each input to the run as an MLflow dataset input (name, digest, local source)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = []
    for item in data:
        name, path = str(_field(item, "name")), str(_field(item, "path"))
        digest = _field(item, "digest")
        real = os.path.realpath(path)
        fp = recent(real, digest) if digest else None
        if fp is None:
            fp = fingerprint(real, getattr(tracker, "home", None))
        profile = {"files": fp.files, "bytes": fp.bytes}
        dataset = Dataset(
            name=name,
            digest=fp.digest,
            source_type="local",
            source=json.dumps({"uri": real}),
            profile=json.dumps(profile),
        )
        tags = [InputTag(CONTEXT_TAG, context), InputTag("air.data.name", name)]
        inputs.append(DatasetInput(dataset=dataset, tags=tags))
    if not inputs:
        return
    try:
        tracker.log_inputs(run_id, inputs)
    except TrackingUnavailable:
        raise
    except Exception as exc:
        raise TrackingUnavailable(
            f"cannot log data inputs to MLflow run {run_id}: {str(exc)[:200]}",
            hint="the job runs; its data lineage is missing from MLflow",
        ) from None


# --- exit: did the inputs change? --------------------------------------------------------------


def exit_note(home: Path, data: list[dict[str, Any]], run_id: str | None) -> str:
    """Re-check the inputs at exit; a text for the job's message if any changed.

    Bounded: metadata (size, mtime, inode) is compared first, and content is re-read only
    within ``AIR_DATA_RECHECK_MAX_MB`` and ``AIR_DATA_RECHECK_MAX_S`` for all inputs together;
    past them an input is reported "changed (size/mtime)" or "not re-checked (too large)".
    A changed input whose new digest is known is also logged to the run as a dataset input with
    context ``changed-during-run``, so MLflow shows both versions.
    """
    budget = Budget.of(
        settings.get("AIR_DATA_RECHECK_MAX_MB") * (1 << 20), settings.get("AIR_DATA_RECHECK_MAX_S")
    )
    changes: list[str] = []
    unchecked: list[str] = []
    changed: list[dict[str, Any]] = []
    for item in data:
        before = item.get("digest")
        if not before:
            continue
        try:
            result = recheck(item["path"], home, before, budget)
        except (OSError, DataPathRefused):
            changes.append(f"{item['name']} is gone or unreadable")
            continue
        if result.state == "changed" and result.digest:
            changes.append(f"{item['name']} {before[:12]} -> {result.digest[:12]}")
            changed.append({**item, "digest": result.digest})
        elif result.state == "meta-changed":
            changes.append(f"{item['name']} changed (size/mtime)")
        elif result.state == "unchecked":
            unchecked.append(f"{item['name']} not re-checked (too large)")
    if changed and run_id:
        try:
            from air_skills.tracking.mlflow import tracking_uri
            from air_skills.tracking.writer import tracker_for

            tracker = tracker_for(home, tracking_uri(home))  # the home's writer, or MLflow here
            if hasattr(tracker, "log_data_inputs"):
                tracker.log_data_inputs(run_id, changed, "changed-during-run")
            else:
                log_inputs(tracker, run_id, changed, context="changed-during-run")
        except Exception:
            pass  # the message below still says it
    note = ""
    if changes:
        note += (
            " (data inputs changed during the job: " + "; ".join(changes) + "; the run logged"
            " the launch version, so results may not match it)"
        )
    if unchecked:
        note += " (data inputs at exit: " + "; ".join(unchecked) + ")"
    return note


def data_refs(data: Iterable[Any]) -> list[str]:
    """Compact ``name@digest12`` references, for JobInfo."""
    return [f"{_field(d, 'name')}@{(_field(d, 'digest') or '?')[:12]}" for d in data]
