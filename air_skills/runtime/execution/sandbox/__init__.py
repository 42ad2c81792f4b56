"""A job's sandbox: its command wrapped in bubblewrap (``bwrap``), so it can change only its folder.

What a sandboxed job sees: the whole filesystem read-only; its own job folder (checkpoints,
outputs, logs, its private code view) writable; a private ``/tmp`` and ``/dev/shm``; a fresh
minimal ``/dev`` (its own GPUs' nodes only: sandbox_devices.py); the folders its spec names in
``writable``; its data inputs read-only at the real paths checked at start; the ML caches
(sandbox_caches.py). ``AIR_HOME`` is hidden beyond the job's folder (no ``air.db``, code store,
other jobs, studies, MLflow store). A network namespace of its own: the host's loopback
services are out of reach; outbound through slirp4netns unless ``network: false``
(sandbox_net.py). Where air runs as root the job runs as AIR_SANDBOX_UID, an unprivileged host
uid (job_user). A gang runs whole (torchrun and every rank) in one sandbox. Stdlib only: the
supervisor builds on it. Its parts: bwrap.py (the program), paths.py (what the base view
hides), uid.py (the job's host uid), mounts.py (the view), checks.py (a job's edges).
"""

from __future__ import annotations

from air_skills.runtime.execution.sandbox.bwrap import (
    KIND,
    SandboxUnavailable,
    bwrap_path,
    describe,
    unavailable,
)
from air_skills.runtime.execution.sandbox.checks import (
    doctor_check,
    failure_note,
    resolved,
    signal_status,
    uid_check,
)
from air_skills.runtime.execution.sandbox.mounts import (
    View,
    base_args,
    host_network_granted,
    mount_args,
    tmp_bytes,
    view,
    wrap,
)
from air_skills.runtime.execution.sandbox.paths import inside, program_paths
from air_skills.runtime.execution.sandbox.uid import USER_CAPS, become, hand_over, job_user

__all__ = [
    "KIND",
    "SandboxUnavailable",
    "USER_CAPS",
    "View",
    "base_args",
    "become",
    "bwrap_path",
    "describe",
    "doctor_check",
    "failure_note",
    "hand_over",
    "host_network_granted",
    "inside",
    "job_user",
    "mount_args",
    "program_paths",
    "resolved",
    "signal_status",
    "tmp_bytes",
    "uid_check",
    "unavailable",
    "view",
    "wrap",
]
