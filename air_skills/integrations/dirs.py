"""Folders created so that a failed write can take them back (both installers use it)."""

from __future__ import annotations

from pathlib import Path


def make_dirs(path: Path) -> list[Path]:
    """mkdir -p that remembers what it created, so a failure can take it back."""
    created: list[Path] = []
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(probe))
    try:
        for p in reversed(missing):
            p.mkdir()
            created.append(p)
    except OSError:
        remove_dirs(created)
        raise
    return created


def remove_dirs(created: list[Path]) -> None:
    for p in reversed(created):
        try:
            p.rmdir()
        except OSError:
            pass
