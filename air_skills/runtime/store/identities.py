"""Identities of the agents that share one pool: a name, its project, its limits, its token.

A token is shown once, when it is made, and kept only as its SHA-256 (a token is 256 random
bits: no salt or slow hash is needed against guessing). The limits are enforced where a job is
queued (``check_launch``, called by ``Store.queue`` inside the queueing transaction), so two
launches racing cannot both pass a GPU limit.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from air_skills.errors import AirError, InvalidInput, NotFound
from air_skills.status import PRIORITY_RANK

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Forbidden(AirError):
    """An identity asked for what its token does not allow (another project, too many GPUs)."""

    code = "forbidden"
    exit_code = 2


@dataclass(frozen=True)
class Identity:
    """Who is calling: a token's name, its project and limits (``admin`` may act for anyone)."""

    name: str
    project: str
    max_gpus: int | None = None
    priority_max: str = "high"
    admin: bool = False


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    # os.urandom as secrets does, with a prefix that says what the string is for.
    return "air_" + os.urandom(32).hex()


def add(
    c: sqlite3.Connection,
    name: str,
    project: str,
    *,
    max_gpus: int | None = None,
    priority_max: str = "high",
    admin: bool = False,
) -> str:
    """Record a new identity; returns its token (the only time it is ever shown)."""
    problems = []
    if not NAME_RE.match(name):
        problems.append(f"name {name!r}: letters, digits, '.', '_', '-' (at most 64)")
    if not NAME_RE.match(project):
        problems.append(f"project {project!r}: letters, digits, '.', '_', '-'")
    if priority_max not in PRIORITY_RANK:
        problems.append(f"priority-max {priority_max!r}: one of {', '.join(PRIORITY_RANK)}")
    if max_gpus is not None and max_gpus < 0:
        problems.append("max-gpus: 0 or more")
    if problems:
        raise InvalidInput("bad identity: " + "; ".join(problems), hint="fix them and run again")
    row = c.execute("SELECT revoked_at FROM identities WHERE name=?", (name,)).fetchone()
    if row is not None and row[0] is None:
        raise InvalidInput(
            f"identity {name!r} exists",
            hint=f"revoke it first (`air mcp-token revoke {name}`) or choose another name",
        )
    token = new_token()
    c.execute("DELETE FROM identities WHERE name=?", (name,))
    c.execute(
        "INSERT INTO identities (name, token_hash, project, max_gpus, priority_max, admin,"
        " created_at) VALUES (?,?,?,?,?,?,?)",
        (name, token_hash(token), project, max_gpus, priority_max, int(admin), time.time()),
    )
    return token


def revoke(c: sqlite3.Connection, name: str) -> None:
    cur = c.execute(
        "UPDATE identities SET revoked_at=? WHERE name=? AND revoked_at IS NULL",
        (time.time(), name),
    )
    if not cur.rowcount:
        raise NotFound(
            f"no active identity named {name!r}", hint="list them with `air mcp-token ls`"
        )


def listing(c: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every identity (revoked ones too), never a token or its hash."""
    rows = c.execute(
        "SELECT name, project, max_gpus, priority_max, admin, created_at, revoked_at,"
        " (SELECT coalesce(sum(gpus_requested), 0) FROM jobs WHERE launched_by=identities.name"
        " AND status IN ('QUEUED','RUNNING')) AS gpus_in_use FROM identities ORDER BY name"
    ).fetchall()
    keys = ("name", "project", "max_gpus", "priority_max", "admin", "created_at", "revoked_at")
    out = []
    for r in rows:
        item = dict(zip(keys, r[:7], strict=True))
        item["admin"] = bool(item["admin"])
        item["gpus_in_use"] = r[7]
        out.append(item)
    return out


def for_token(c: sqlite3.Connection, token: str) -> Identity | None:
    """The active identity whose token this is; None for any other string."""
    digest = token_hash(token.strip())
    row = c.execute(
        "SELECT name, project, max_gpus, priority_max, admin, token_hash FROM identities"
        " WHERE token_hash=? AND revoked_at IS NULL",
        (digest,),
    ).fetchone()
    if row is None or not hmac.compare_digest(row[5], digest):
        return None
    return Identity(row[0], row[1], row[2], row[3], bool(row[4]))


def check_launch(
    c: sqlite3.Connection, spec: Any, launched_by: str | None, asked: str | None
) -> None:
    """Inside the queueing transaction: an identity's job stays within its token's limits."""
    if not launched_by:
        return
    row = c.execute(
        "SELECT project, max_gpus, priority_max, revoked_at FROM identities WHERE name=?",
        (launched_by,),
    ).fetchone()
    if row is None:  # the local user, or a name no token holds: no limits of an identity
        return
    project, max_gpus, priority_max, revoked_at = row
    if revoked_at is not None:
        raise Forbidden(
            f"the token of {launched_by!r} was revoked", hint="ask the pool's owner for a new one"
        )
    asked = asked or project
    if asked != project:
        raise Forbidden(
            f"{launched_by!r} may launch only in project {project!r}, not {asked!r}",
            hint=f"drop the project (it is {project!r} for this token), or use a token of"
            f" project {asked!r}",
        )
    priority = spec.get("priority", "normal")
    if PRIORITY_RANK[priority] > PRIORITY_RANK[priority_max]:
        raise Forbidden(
            f"{launched_by!r} may launch at most priority {priority_max!r}, not {priority!r}",
            hint=f"use priority {priority_max!r} or lower",
        )
    gpus = int(spec.get("gpus") or 0)  # per node, as the jobs' gpus_requested
    if max_gpus is not None and gpus:
        used = c.execute(
            "SELECT coalesce(sum(gpus_requested), 0) FROM jobs WHERE launched_by=?"
            " AND status IN ('QUEUED','RUNNING')",
            (launched_by,),
        ).fetchone()[0]
        if used + gpus > max_gpus:
            raise Forbidden(
                f"{launched_by!r} may hold at most {max_gpus} GPUs; {used} are in its queued and"
                f" running jobs, and this job asks for {gpus}",
                hint="wait for a job to end (wait_for_jobs), or cancel one",
            )
