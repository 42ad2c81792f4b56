"""The ``Backend`` protocol, the registry of backends by name, and their shared errors."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from air_skills.errors import BackendUnavailable, InvalidInput, InvalidState

if TYPE_CHECKING:
    from air_skills.models import JobInfo, JobSpec
    from air_skills.runtime.launch.prepare import LaunchContext
    from air_skills.runtime.store.records import JobRecord


class Backend(Protocol):
    """Where jobs run. The client names no backend: it dispatches on ``spec.backend``."""

    def launch(self, spec: JobSpec, dry_run: bool = False) -> JobInfo:
        """Record and start (or queue) the job; with ``dry_run``, say what would happen."""
        ...

    def cancel(self, record: JobRecord, reason: str, wait_s: float) -> JobInfo:
        """Stop a queued or running job; raise ``already_finished`` for a terminal one."""
        ...

    def reconcile(self) -> int:
        """Settle this backend's live records against what really runs; how many changed."""
        ...

    def logs(self, record: JobRecord) -> None:
        """Bring the job's log file up to date (a no-op where the job writes it itself)."""
        ...


Factory = Callable[["LaunchContext"], Backend]

# name -> factory, or "module:attribute" loaded on first use: a backend's module (and its
# SDK) is imported only when a job uses it, and this module imports no backend.
_FACTORIES: dict[str, Factory | str] = {
    "local": "air_skills.backends.local:LocalBackend",
    "ray": "air_skills.backends.ray:RayBackend",
    "slurm": "air_skills.backends.slurm.backend:SlurmBackend",
}
# What to install for a backend whose module cannot be imported here.
_EXTRAS: dict[str, str] = {"ray": "pip install 'air-skills[ray]'"}


def register(name: str, factory: Factory | str, *, extra: str | None = None) -> None:
    """Make ``backend: name`` in a spec run on ``factory(context)`` (or ``"module:attr"``)."""
    _FACTORIES[name] = factory
    if extra:
        _EXTRAS[name] = extra


def names() -> list[str]:
    """The registered backends' names."""
    return sorted(_FACTORIES)


def backend(name: str, runtime: LaunchContext) -> Backend:
    """The backend registered as ``name``, over ``runtime``."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise InvalidInput(
            f"unknown backend {name!r}",
            hint="use one of " + ", ".join(names()),
            valid_keys=names(),
        )
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            extra = _EXTRAS.get(name)
            raise BackendUnavailable(
                f"backend {name!r} is not installed here ({exc})",
                hint=f"{extra}, or launch with backend 'local'" if extra else "reinstall",
                retryable=False,
            ) from None
        _FACTORIES[name] = factory
    return factory(runtime)


def already_finished(job_id: str, status: str) -> InvalidState:
    """The error for cancelling a job that has already ended (every backend raises it)."""
    return InvalidState(
        f"job {job_id} already finished ({status}); nothing to cancel",
        hint=f"read it with `air status {job_id}`",
        job_id=job_id,
        status=status,
    )
