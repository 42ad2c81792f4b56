"""bwrap on this host: finding it, whether it works here, and what a job's record says."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Mapping

from air_skills import settings
from air_skills.runtime.execution import sandbox_probe

# What a job's record says when it ran in one (``JobInfo.sandbox``).
KIND = "bwrap"


class SandboxUnavailable(OSError):
    """A job that must run sandboxed cannot be: no bwrap, or the kernel refuses it."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"no sandbox can be made ({reason}) and the job asks for one (sandbox: on)"
        )
        self.reason = reason


def bwrap_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The bwrap program AIR_BWRAP names, found on the environment's PATH; None if missing."""
    env = os.environ if environ is None else environ
    name = settings.get("AIR_BWRAP", env) or ""
    if not name:
        return None
    return _which(name, env.get("PATH", os.defpath))


@functools.lru_cache(maxsize=16)
def _which(name: str, path: str) -> str | None:
    """shutil.which, once per (name, PATH) for this process: a supervisor starts many jobs."""
    return shutil.which(name, path=path)


def unavailable(environ: Mapping[str, str] | None = None) -> str | None:
    """Why no sandbox can be made here (``None``: one can); sandbox_probe.py asks bwrap."""
    path = bwrap_path(environ)
    if path is None:
        name = settings.get("AIR_BWRAP", os.environ if environ is None else environ)
        return f"{name or 'bwrap'} not found on PATH: install bubblewrap"
    return sandbox_probe.probe(path)


def describe(spec: Mapping[str, object]) -> str | None:
    """What a job's record says of its sandbox: ``bwrap``, ``bwrap, no network`` or
    ``none (reason)``; None for a spec from before sandboxes (or another backend's)."""
    mode = spec.get("sandbox")
    if mode == "on" and spec.get("image"):
        return "container"  # the engine's: bwrap does not wrap it (metrics still relayed)
    if mode == "on":
        return KIND + ("" if spec.get("network", True) else ", no network")
    if mode == "off":
        tags = spec.get("tags")
        note = tags.get("air.sandbox") if isinstance(tags, Mapping) else None
        return f"none ({note or 'sandbox: off'})"
    return None
