"""A job runs with the settings of the launch that made it (issue 38.7), never those of the
idle supervisor that picks it up: an idle supervisor started from a shell without
AIR_SIMULATED_GPUS ran the NVML preflight on a simulated GPU and cordoned it.

Before a supervisor checks or starts a job, its own AIR_* settings become the job's launch's
(``env.json``: the non-secret settings, job_env.PASSTHROUGH_AIR_SETTINGS); a setting the launch
did not have is unset. The GPU provider reads AIR_SIMULATED_GPUS on each call, so the preflight
and the pass after the job see the launch's pool. Stdlib only.
"""

from __future__ import annotations

import os
from pathlib import Path

from air_skills.home import job_dir, read_launch_env
from air_skills.runtime.execution.job_env import PASSTHROUGH_AIR_SETTINGS

# The supervisor's own, set by its spawner for this process: never the launch's to change.
_OWN = frozenset({"AIR_HOME"})


def adopt(home: Path, job_id: str) -> list[str]:
    """Take the launch's AIR_* settings into this process's environment; the names changed."""
    try:
        launched = read_launch_env(job_dir(home, job_id))
    except (OSError, ValueError):
        return []
    if launched is None:  # an older launch kept no environment: nothing to go by
        return []
    changed = []
    for name in PASSTHROUGH_AIR_SETTINGS:
        if name in _OWN or os.environ.get(name) == launched.get(name):
            continue
        changed.append(name)
        if name in launched:
            os.environ[name] = launched[name]
        else:
            os.environ.pop(name, None)
    return changed
