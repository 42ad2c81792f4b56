"""Store blobs that do not hash to their name: moved aside (``code/quarantine/``), reported.

A blob is named by the sha256 of its bytes; one whose bytes no longer hash to its name was
corrupted or rewritten. Whoever finds one (the trusted evaluator, as it materialises the
protected files) quarantines it: no view is built from it again, and ``air doctor`` says so.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from air_skills.runtime.code.snapshot_store import blob_path, code_root

QUARANTINE = "quarantine"


def quarantine(home: Path, sha256: str) -> Path | None:
    """Move the blob named ``sha256`` aside; where it went (None: it was not there)."""
    folder = code_root(home) / QUARANTINE
    folder.mkdir(mode=0o700, exist_ok=True)
    dest = folder / f"{sha256}.{int(time.time())}"
    try:
        os.rename(blob_path(home, sha256), dest)
    except FileNotFoundError:
        return None
    return dest


def quarantined(home: Path) -> list[str]:
    """The names of the quarantined blobs (newest last)."""
    folder = code_root(home) / QUARANTINE
    try:
        return sorted(os.listdir(folder), key=lambda n: n.rsplit(".", 1)[-1])
    except FileNotFoundError:
        return []


def doctor_check(home: Path) -> dict[str, str]:
    """`air doctor`'s line on the code store's integrity."""
    found = quarantined(home)
    if not found:
        return {"name": "code store", "status": "ok", "detail": "no corrupt blob found", "next": ""}
    return {
        "name": "code store",
        "status": "warn",
        "detail": f"{len(found)} blob(s) did not hash to their name and were quarantined in"
        f" {code_root(home) / QUARANTINE}: {', '.join(n[:16] for n in found[-3:])}",
        "next": "find what wrote AIR_HOME/code (only air should); the studies that used those"
        " files marked their trials tampered; delete the quarantine folder once understood",
    }
