"""Where this home's studies are: one small file per study name under AIR_HOME/studies/.index,
written when a loop starts, so that ``get_study(name)`` finds a study wherever its folder is."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from air_skills.home import default_home

STUDIES = "studies"  # AIR_HOME/studies/<name>: a study's default folder, outside any code tree
INDEX = ".index"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def studies_root() -> Path:
    """AIR_HOME/studies."""
    return default_home() / STUDIES


def default_folder(name: str) -> Path:
    """A study's folder when none is given: AIR_HOME/studies/<name>."""
    return (studies_root() / name).resolve()


def register(name: str, folder: Path) -> None:
    """Record that study ``name`` lives in ``folder`` (the last one started wins)."""
    if not _NAME.fullmatch(name):
        return  # a name no file may be made of: found by its folder only
    index = studies_root() / INDEX
    with contextlib.suppress(OSError):  # a read-only home: the study runs all the same
        index.mkdir(parents=True, exist_ok=True)
        tmp = index / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(str(Path(folder).resolve()) + "\n", encoding="utf-8")
        tmp.replace(index / name)


def registered(name: str) -> Path | None:
    """The folder that study ``name`` was last started in, if it is still there."""
    if not _NAME.fullmatch(name):
        return None
    try:
        text = (studies_root() / INDEX / name).read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return None
    folder = Path(text)
    return folder if text and folder.is_absolute() and folder.is_dir() else None


def find(name: str) -> Path | None:
    """Study ``name``'s folder: registered, else AIR_HOME/studies/<name>, else ./studies/<name>
    (where studies went before); None when none of them is a folder."""
    if not _NAME.fullmatch(name):
        return None
    for folder in (registered(name), default_folder(name), Path.cwd() / STUDIES / name):
        if folder is not None and folder.is_dir():
            return folder.resolve()
    return None
