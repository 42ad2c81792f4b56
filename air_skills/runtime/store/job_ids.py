"""A job id from what a user typed: the id itself, or a unique prefix of it (git-style).

Stdlib only: `air status --json` resolves ids without the Client (cli/fast), as the Client
does (``Client.resolve_id``), with this one function.
"""

from __future__ import annotations

import re

from air_skills.errors import InvalidInput, NotFound
from air_skills.home import JOB_ID_RE, check_job_id
from air_skills.runtime.store.store import Store

# A job id's prefix: job-1de7, or the hex alone from 4 characters.
ID_PREFIX_RE = re.compile(r"^(job-[0-9a-f]{1,10}|[0-9a-f]{4,10})$")


def resolve_job_id(store: Store, job_id: str) -> str:
    """The job id ``job_id`` names: itself, or the one job whose id starts with it
    (``job-1de7`` or ``1de7``); an ambiguous prefix is refused, listing the matches."""
    if not isinstance(job_id, str) or not ID_PREFIX_RE.match(job_id.lower()):
        return check_job_id(job_id)
    typed = job_id.lower()
    prefix = typed if typed.startswith("job-") else f"job-{typed}"
    if JOB_ID_RE.match(prefix):
        return prefix
    found = store.read(
        "SELECT job_id FROM jobs WHERE substr(job_id, 1, ?) = ? ORDER BY created_at DESC LIMIT 11",
        (len(prefix), prefix),
    )
    ids = [str(r[0]) for r in found]
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise NotFound(
            f"no job whose id starts with {job_id!r}",
            hint="list jobs with `air ls` (MCP: list_jobs)",
            job_id=job_id,
        )
    shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
    raise InvalidInput(
        f"{job_id!r} is the start of {'more than 10' if len(ids) > 10 else len(ids)} job"
        f" ids: {shown}",
        code="ambiguous-id",
        hint="give more characters of the id (`air ls` lists them)",
        job_id=job_id,
        valid_keys=ids[:10],
    )
