"""A local job's sandbox decided at launch: ``auto`` becomes ``on`` or ``off`` (with why).

The spec keeps the decision (``sandbox: on | off``, ``air.sandbox`` tag with the reason for
none); runtime/execution/sandbox/ wraps the command as the job starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from air_skills import settings
from air_skills.errors import BackendUnavailable, InvalidInput
from air_skills.runtime.execution import sandbox

if TYPE_CHECKING:
    from air_skills.models import JobSpec

REASON_TAG = "air.sandbox"


def resolve_sandbox(spec: JobSpec, home: Path) -> JobSpec:
    """``spec`` with its sandbox decided and its ``writable`` folders checked (real paths).

    ``on`` where no sandbox can be made is refused (``sandbox-unavailable``); ``auto`` runs
    the job unsandboxed then, and its record says why.
    """
    mode = spec.sandbox or settings.get("AIR_SANDBOX")
    if spec.sandbox == "off" and spec.tags.get(REASON_TAG) not in (None, "sandbox: off"):
        mode = settings.get("AIR_SANDBOX")  # a rerun of a job that had none where it ran
    if not spec.network:  # only a sandbox can cut the network: never dropped silently
        if mode == "off":
            raise InvalidInput(
                "network: false needs a sandbox, and the job has sandbox: off: nothing launched",
                code="invalid-spec",
                hint="drop sandbox: off (or AIR_SANDBOX=off), or drop network: false",
            )
        mode = "on"
    writable = check_writable(spec.writable, home) if spec.writable else []
    tags = {k: v for k, v in spec.tags.items() if k != REASON_TAG}
    if mode == "off":
        tags[REASON_TAG] = "sandbox: off"
        return spec.model_copy(update={"sandbox": "off", "writable": writable, "tags": tags})
    why = sandbox.unavailable()
    if why is None:
        return spec.model_copy(update={"sandbox": "on", "writable": writable, "tags": tags})
    if mode == "on":
        raise BackendUnavailable(
            f"no sandbox can be made here ({why}) and the job asks for one (sandbox: on):"
            " nothing launched",
            code="sandbox-unavailable",
            hint="install bubblewrap (apt-get install bubblewrap; `air doctor` checks it), or"
            " launch with sandbox auto (runs unsandboxed where none can be made) or off",
            reason=why,
        )
    tags[REASON_TAG] = why
    return spec.model_copy(update={"sandbox": "off", "writable": writable, "tags": tags})


def check_writable(paths: list[str], home: Path) -> list[str]:
    """The real paths of a spec's ``writable`` folders, each an existing folder under
    AIR_DATA_ROOTS and apart from AIR_HOME; every problem is listed in one refusal."""
    from air_skills.tracking.data import allowed_roots, is_under

    roots = allowed_roots()
    home_real = Path(os.path.realpath(home))
    problems: list[str] = []
    out: list[str] = []
    for path in paths:
        if "\x00" in path:
            problems.append("a writable path holds a NUL byte")
            continue
        real = Path(os.path.realpath(os.path.expanduser(path)))
        if not real.is_dir():
            problems.append(f"{path}: not an existing folder")
        elif not roots or not is_under(real, roots):
            problems.append(f"{path} ({real}) is outside the allowed roots (AIR_DATA_ROOTS)")
        elif is_under(real, [home_real]) or is_under(home_real, [real]):
            problems.append(f"{path} ({real}) overlaps AIR_HOME ({home_real})")
        else:
            out.append(os.fspath(real))
    if problems:
        raise InvalidInput(
            "writable folders refused, nothing launched: " + "; ".join(problems),
            code="writable-refused",
            hint="name existing folders under AIR_DATA_ROOTS (outside AIR_HOME) as writable,"
            " or write into the job's own folder ($AIR_CHECKPOINT_DIR)",
            problems=problems,
        )
    return out
