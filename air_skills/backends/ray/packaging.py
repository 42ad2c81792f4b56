"""The job's working_dir package (Ray's size limit, the check, the upload) and entrypoint."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from air_skills.backends.ray.sdk import forget, is_connection_error, short, unavailable
from air_skills.errors import InvalidSpec

# Tests lower this to check the refusal without writing hundreds of MiB; None: Ray's limit.
WORKING_DIR_LIMIT_BYTES: int | None = None
FALLBACK_PACKAGE_LIMIT_BYTES = 512 * 1024 * 1024  # GCS_STORAGE_MAX_SIZE in Ray 2.60
FALLBACK_BODY_LIMIT_BYTES = 100 * 1024 * 1024  # DASHBOARD_CLIENT_MAX_SIZE in Ray 2.60


def package_limit_bytes() -> int:
    """Ray's limit for a working_dir uploaded through the Jobs API.

    The smaller of the dashboard's request body limit (the package is one HTTP PUT: 100 MiB
    in Ray 2.60) and the GCS's gRPC message size, where it is stored (512 MiB).
    """
    if WORKING_DIR_LIMIT_BYTES is not None:
        return WORKING_DIR_LIMIT_BYTES
    limits = [FALLBACK_PACKAGE_LIMIT_BYTES]
    try:
        from ray._private.ray_constants import DASHBOARD_CLIENT_MAX_SIZE

        limits.append(int(DASHBOARD_CLIENT_MAX_SIZE))
    except Exception:
        limits.append(FALLBACK_BODY_LIMIT_BYTES)
    try:
        from ray._private.runtime_env.packaging import GCS_STORAGE_MAX_SIZE

        limits.append(int(GCS_STORAGE_MAX_SIZE))
    except Exception:
        pass
    return min(limits)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def working_dir_problem(workdir: str) -> str | None:
    """Why Ray would refuse ``workdir`` as a working_dir package, or None if it fits.

    Walks it as Ray does (its default excludes, .gitignore and .rayignore respected). Ray
    stores the files in the zip uncompressed, so their sizes (plus zip headers) are the
    package's size.
    """
    limit = package_limit_bytes()
    root = Path(workdir).absolute()
    sizes: dict[str, int] = {}

    def count(path: Path) -> None:
        if path == root:
            return
        rel = path.relative_to(root)
        size = 76 + 2 * len(str(rel).encode())  # local header + central directory entry
        if path.is_file() and not path.is_symlink():
            size += path.stat().st_size
        sizes[rel.parts[0]] = sizes.get(rel.parts[0], 0) + size

    include_gitignore = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    try:
        from ray._private.ray_constants import get_runtime_env_default_excludes
        from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

        excludes = get_runtime_env_default_excludes()  # .git, .venv, venv, __pycache__
        _dir_travel(
            root, [_get_excludes(root, excludes)], count, include_gitignore=include_gitignore
        )
    except ImportError:  # Ray moved its helpers: count everything
        for dirpath, _, files in os.walk(root):
            for name in files:
                count(Path(dirpath) / name)
    total = sum(sizes.values())
    if total < limit:
        return None
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    return (
        f"workdir {root} makes a {_mib(total)} package, over Ray's {_mib(limit)} limit for a"
        " working_dir (Ray zips it uncompressed); largest entries: "
        + ", ".join(f"{name} ({_mib(n)})" for name, n in biggest)
    )


def upload(ray: Any, dashboard: str, runtime_env: dict[str, Any]) -> None:
    """Upload the working_dir now; runtime_env then names the package, not the folder."""
    send = getattr(ray, "_upload_working_dir_if_needed", None)
    if send is None:  # a Ray without it uploads inside submit_job instead
        return
    try:
        send(runtime_env)
    except Exception as exc:
        if is_connection_error(exc):
            forget(ray)
            raise unavailable(dashboard, exc) from None
        raise InvalidSpec(
            f"Ray refused the working_dir {runtime_env.get('working_dir')}: {short(exc)}",
            hint="list large or unreadable files in .rayignore, or use a smaller workdir",
        ) from None


def entrypoint(command: list[str]) -> str:
    """Ray runs the entrypoint with /bin/sh: write the config where AIR_CONFIG_FILE says,
    then exec the argv, each argument quoted (never interpreted by the shell). First the
    node prints its hardware record as the log's first line (gpu/node_hardware.py; where this
    Python with AIR Skills is on the node, else nothing: the job starts all the same)."""
    hardware = f"{shlex.quote(sys.executable)} -m air_skills.gpu.node_hardware ray 2>/dev/null;"
    return (
        hardware + ' mkdir -p "$AIR_CHECKPOINT_DIR" "$AIR_DATA_DIR"'
        ' && printf "%s" "$AIR_CONFIG_JSON" > "$AIR_CONFIG_FILE"'
        " && unset AIR_CONFIG_JSON && exec " + shlex.join(command)
    )
