"""The Client acting for an identity of air-mcp's HTTP callers: who launches, in which
project, within which limits (`air mcp-token`)."""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Self

from air_skills.runtime.store.identities import Identity
from air_skills.runtime.store.records import JobRecord

if TYPE_CHECKING:
    from air_skills.models import JobSpec


@functools.lru_cache(maxsize=1)
def _local_user() -> str:
    """The local user's name (``launched_by`` of a CLI or Python API launch)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid-{os.geteuid()}"


class IdentityMixin:
    """Identities of the agents sharing the pool, and what each may do (mixed into ``Client``)."""

    def as_identity(self, identity: Identity | None) -> Self:
        """This client acting for ``identity`` (the same home, store and tracker)."""
        if identity is None:
            return self
        scoped = copy.copy(self)
        scoped.identity = identity
        return scoped

    def add_identity(
        self,
        name: str,
        project: str,
        *,
        max_gpus: int | None = None,
        priority_max: str = "high",
        admin: bool = False,
        backends: Iterable[str] = ("local",),
        unsandboxed: bool = False,
        data_roots: Iterable[str] = (),
        read_projects: Iterable[str] = (),
    ) -> str:
        """Make an identity for an agent; returns its token (shown once, stored hashed).
        Its rights: ``backends`` it may use, whether it may run ``unsandboxed``, its
        ``data_roots`` and the other projects whose logs it may read (``read_projects``)."""
        from air_skills.runtime.store import identities

        with self.store.tx() as c:
            return identities.add(
                c,
                name,
                project,
                max_gpus=max_gpus,
                priority_max=priority_max,
                admin=admin,
                backends=backends,
                unsandboxed=unsandboxed,
                data_roots=data_roots,
                read_projects=read_projects,
            )

    def identities(self) -> list[dict[str, Any]]:
        """Every identity with its limits and the GPUs its live jobs ask for (no tokens)."""
        from air_skills.runtime.store import identities

        self.reconcile()
        with self.store.tx() as c:
            return identities.listing(c)

    def revoke_identity(self, name: str) -> None:
        """Revoke an identity's token: its next request is refused."""
        from air_skills.runtime.store import identities

        with self.store.tx() as c:
            identities.revoke(c, name)

    def identity_for_token(self, token: str) -> Identity | None:
        """The active identity a bearer token belongs to (None: no identity's token)."""
        from air_skills.runtime.store import identities

        return identities.for_token(self.store.conn, token)

    def launcher(self) -> str:
        """The name a launch records as ``launched_by``: the identity's, else the local user's."""
        if self.identity is not None:
            return self.identity.name
        return _local_user()

    def _for_launcher(self, spec: JobSpec) -> JobSpec:
        """Record who launches; an identity launches in its own project, within its priority
        (its GPU limit is checked where the job is queued, in the same transaction)."""
        update: dict[str, Any] = {"launched_by": self.launcher()}
        who = self.identity
        if who is not None:
            from air_skills.runtime.store.identities import (
                UNSANDBOXED_BACKENDS,
                check_launch,
                check_rights,
            )

            if spec.project is None:
                update["project"] = who.project
            if (
                not who.unsandboxed
                and spec.sandbox in (None, "auto")
                and spec.backend not in UNSANDBOXED_BACKENDS
            ):
                update["sandbox"] = "on"  # never `auto`: none where none can be made
            asked = {**spec.model_dump(mode="json"), **update, "gpus": 0}
            asked["workdir"] = os.path.realpath(spec.workdir or os.getcwd())
            check_rights(who, asked, os.fspath(self.home))  # the token's rights, as held
            with self.store.tx() as c:  # a clear refusal before anything is built
                check_launch(c, asked, who.name, spec.project or who.project)
        return spec.model_copy(update=update)

    def _may_stop(self, row: JobRecord) -> None:
        """An identity cancels its own jobs only (an admin token, any)."""
        who = self.identity
        if who is None or who.admin or row.launched_by == who.name:
            return
        from air_skills.runtime.store.identities import Forbidden

        raise Forbidden(
            f"job {row.job_id} was launched by {row.launched_by or 'the local user'!s}, not"
            f" {who.name!r}: an identity cancels only its own jobs",
            hint="ask its launcher, or use an admin token",
            job_id=row.job_id,
        )

    def check_read(self, job_id: str) -> None:
        """An identity reads logs and metrics of its own projects' jobs only (its own
        project, the ones the owner granted with --read-project, every one for an admin): a
        log may hold what a job printed of its secrets. The board (status, GPUs, the shared
        objective in list_jobs) stays shared."""
        who = self.identity
        if who is None:
            return
        row = self._row(job_id)
        if who.may_read(row.project):
            return
        from air_skills.runtime.store.identities import Forbidden

        raise Forbidden(
            f"job {row.job_id} is in project {row.project or 'default'!s}: {who.name!r} reads"
            f" the logs and metrics of project {who.project!r} only",
            hint="read its status with get_job; ask the pool's owner for"
            f" `air mcp-token add ... --read-project {row.project or 'default'}`",
            job_id=row.job_id,
        )
