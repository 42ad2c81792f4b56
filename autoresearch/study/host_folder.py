"""The host folder: the study specs a host runs, the lock that keeps one host per folder.

Layout (default ``AIR_HOME/host``, owner-only)::

    specs/<name>.yaml   a study spec (``autoresearch host add``, or a file dropped in)
    specs/<name>.dir    the study's folder, when not AIR_HOME/studies/<name>
    specs/<name>.failed.json   why that study could not start (``host add`` again clears it)
    host.json           the running host's pid, start time and host name
    .host.lock          a POSIX lock held while the host runs (dropped by the kernel at a kill)
    host.log            what the host said

A study's own state stays in its own folder and journal, as with ``autoresearch run``: the host
folder only names which studies the host runs.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidInput, InvalidSpec, InvalidState
from air_skills.home import default_home
from air_skills.runtime.process.proc import alive
from autoresearch.study.folder import ProcessLock, private_dir, write_private

SPECS = "specs"
HOST_FILE = "host.json"
HOST_LOCK = ".host.lock"
HOST_LOG = "host.log"
DIR_SUFFIX = ".dir"
FAILED_SUFFIX = ".failed.json"  # beside a spec whose study could not start or crashed: why


def host_dir(given: str | Path | None = None) -> Path:
    """The host folder: ``given``, else AIR_HOME/host."""
    return Path(given).expanduser().resolve() if given else (default_home() / "host").resolve()


def specs_dir(host: Path) -> Path:
    return private_dir(private_dir(host) / SPECS)


def spec_files(host: Path) -> list[Path]:
    """The study specs of the host, by file name (``*.yaml`` and ``*.yml``)."""
    folder = Path(host) / SPECS
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def study_dir_of(spec: Path, study: Any) -> Path:
    """The study folder named beside ``spec`` (``<name>.dir``), else AIR_HOME/studies/<name>."""
    from autoresearch.study.study import default_study_dir

    named = spec.with_suffix(DIR_SUFFIX)
    if named.is_file():
        text = named.read_text(encoding="utf-8").strip()
        if text:
            return Path(text).expanduser().resolve()
    return default_study_dir(study)


def add_specs(
    host: Path,
    sources: list[Path],
    study_dir: str | Path | None = None,
    resume: bool = False,
) -> list[dict[str, Any]]:
    """Check study files and put them among the host's specs (the running host starts each
    within a scan). Every file is checked before any is added; refused (all problems at
    once): a name the host or another of the files already holds, a study folder that already
    holds a journal (unless ``resume``), a study that cannot run. A spec is written with an
    absolute workdir, owner-only (its env may hold keys)."""
    from autoresearch.journal.journal import Journal
    from autoresearch.study.study import check_runnable, default_study_dir, dump_study, load_study

    held: dict[str | None, Path] = {_name_of(p): p for p in spec_files(host)}
    problems: list[str] = []
    ready = []
    replaced: dict[str, Path] = {}
    for source in sources:
        try:
            study = check_runnable(load_study(source))
        except AirError as exc:
            problems.append(f"{source}: [{exc.code}] {exc.message}")
            continue
        folder = Path(study_dir).expanduser().resolve() if study_dir else default_study_dir(study)
        spec = held.get(study.name)
        if spec is not None and spec.with_name(spec.stem + FAILED_SUFFIX).exists():
            replaced[study.name] = spec  # it could not start: added again after the fix
        elif spec is not None:
            problems.append(f"{source}: host already runs a study named {study.name!r}")
        elif Journal(folder).exists() and not resume:
            problems.append(f"{source}: study folder {folder} already holds a journal")
        held[study.name] = Path(source)
        ready.append((study, folder))
    if problems:
        raise InvalidSpec(
            f"nothing was added to host {host}:",
            problems=problems,
            hint="fix what is named (another name, --resume to continue a journal) and add"
            " them again",
        )
    specs = specs_dir(host)
    out = []
    for study, folder in ready:
        old = replaced.get(study.name)
        if old is not None:
            old.with_name(old.stem + FAILED_SUFFIX).unlink(missing_ok=True)
            old.unlink(missing_ok=True)
        if study_dir:
            write_private(specs / f"{study.name}{DIR_SUFFIX}", str(folder) + "\n")
        path = specs / f"{study.name}.yaml"
        write_private(path, dump_study(study))
        out.append({"study": study.name, "spec": str(path), "study_dir": str(folder)})
    return out


def _name_of(spec: Path) -> str | None:
    """The ``name`` a spec file gives, or None when it cannot be read."""
    from autoresearch.study.study import read_yaml

    try:
        data = read_yaml(spec)
    except Exception:
        return None
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) else None


class HostLock(ProcessLock):
    """One host per host folder (``.host.lock``, ``host.json``)."""

    lock_name = HOST_LOCK
    info_name = HOST_FILE

    def refused(self, info: dict[str, Any]) -> AirError:
        return InvalidState(
            f"a host already runs host folder {self.dir}"
            + (f" (pid {info['pid']})" if info.get("pid") else ""),
            hint="add studies to it with `autoresearch host add`; list them with"
            " `autoresearch host ls`; or give another --dir",
        )


def read_host_info(host: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((Path(host) / HOST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def host_alive(host: Path) -> dict[str, Any] | None:
    """The running host's info, or None (its pid alive with the same start time, not ended)."""
    info = read_host_info(host)
    if not info or info.get("ended_at") or info.get("host") != socket.gethostname():
        return None
    return info if alive(info.get("pid"), str(info.get("start"))) else None


def check_name(name: str) -> str:
    if not name or "/" in name or name.startswith("."):
        raise InvalidInput(f"not a study name: {name!r}", hint="give the study's name")
    return name


def take_back(spec: Path) -> None:
    """Remove a study's spec from the host folder, with its ``.dir`` and ``.failed.json``
    (start_study takes back a study refused before its first trial ran)."""
    for path in (spec.with_name(spec.stem + FAILED_SUFFIX), spec.with_suffix(DIR_SUFFIX), spec):
        path.unlink(missing_ok=True)
