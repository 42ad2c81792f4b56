"""A long-lived launcher's memory of image IDs, kept only while podman's image store is unchanged.

Resolving an image to its ID costs one ``podman image inspect`` (about 30 ms) before every
launch. air-mcp and the study loop launch the same image again and again, so the answer is
kept per process, stamped with the store's ``<driver>-images/images.json`` (inode, mtime,
size): podman rewrites that file whenever an image is added, removed or (re)tagged, so a stamp
that still matches means the name still points at the same ID. The store's folder is asked of
podman once, in the background, after a first launch: a one-shot CLI never pays for it. Docker
(no file to stamp) is never cached. Stdlib only.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

_lock = threading.Lock()
_stores: dict[str, Path | None] = {}  # engine -> its images.json (None: not known / none)
_asking: set[str] = set()
_known: dict[tuple[str, str], tuple[str, tuple[int, int, int]]] = {}


def _is_podman(engine: str) -> bool:
    return os.path.basename(engine).startswith("podman")


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _find_store(engine: str) -> None:
    """Ask podman where its image store is (in a background thread)."""
    found: Path | None = None
    try:
        done = subprocess.run(
            [engine, "info", "--format", "{{.Store.GraphRoot}} {{.Store.GraphDriverName}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        root, _, driver = done.stdout.strip().partition(" ")
        if done.returncode == 0 and root and driver:
            path = Path(root) / f"{driver}-images" / "images.json"
            found = path if path.is_file() else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    with _lock:
        _stores[engine] = found
        _asking.discard(engine)


def store_stamp(engine: str) -> tuple[int, int, int] | None:
    """The image store's stamp now (None while its folder is not known): taken before an
    inspect, so an image changed while podman answered is not kept under the new stamp."""
    with _lock:
        store = _stores.get(engine)
    return _stamp(store) if store is not None else None


def cached_id(engine: str, image: str, stamp: tuple[int, int, int] | None) -> str | None:
    """The ID this process resolved for ``image``, if the store's ``stamp`` is the one it was
    resolved under."""
    with _lock:
        hit = _known.get((engine, image))
    if stamp is None or hit is None:
        return None
    return hit[0] if hit[1] == stamp else None


def remember(
    engine: str,
    image: str,
    ident: str,
    stamp: tuple[int, int, int] | None,
    *,
    background: bool = True,
) -> None:
    """Keep ``image`` -> ``ident`` under the ``stamp`` taken before it was resolved; the first
    call per engine finds the store (in a thread unless ``background`` is False). ``engine``
    is the executable's path: answers are kept per binary (another PATH, another store)."""
    if not _is_podman(engine):
        return
    with _lock:
        start = engine not in _stores and engine not in _asking
        if start:
            _asking.add(engine)
    if start:
        if background:
            threading.Thread(target=_find_store, args=(engine,), daemon=True).start()
        else:
            _find_store(engine)
    if stamp is not None and store_stamp(engine) == stamp:
        with _lock:
            _known[(engine, image)] = (ident, stamp)
