"""Identities of the agents that share one pool: a name, its project, its limits, its token.

A token is shown once, when it is made, and kept only as its SHA-256 (a token is 256 random
bits: no salt or slow hash is needed against guessing). The limits are enforced where a job is
queued (``check_launch``, called by ``Store.queue`` inside the queueing transaction), so two
launches racing cannot both pass a GPU limit.

What an identity may do is fields of it (issue 37): the backends it may use (``local`` only by
default), whether it may run unsandboxed (no by default: then no ``sandbox: off``, no backend
without a sandbox, no ``code: live``), its data roots (its workdir, data and ``writable``
folders lie under them; the pool's AIR_DATA_ROOTS when it has none), and the other projects
whose logs and metrics it may read (its own always). The owner (no token, or AIR_MCP_TOKEN)
is no identity: every right.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Mapping
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
    backends: tuple[str, ...] = ("local",)
    unsandboxed: bool = False  # may run without a sandbox (sandbox: off, code: live, ray)
    data_roots: tuple[str, ...] = ()  # real paths; () takes the pool's AIR_DATA_ROOTS
    read_projects: tuple[str, ...] = ()  # besides its own; "*": every project

    def may_read(self, project: str | None) -> bool:
        """Whether its logs and metrics tools may read a job of ``project``."""
        if self.admin or "*" in self.read_projects:
            return True
        return (project or "default") in (self.project, *self.read_projects)


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
    backends: Iterable[str] = ("local",),
    unsandboxed: bool = False,
    data_roots: Iterable[str] = (),
    read_projects: Iterable[str] = (),
) -> str:
    """Record a new identity; returns its token (the only time it is ever shown)."""
    problems = []
    backends = list(dict.fromkeys(backends)) or ["local"]
    for b in backends:
        if not NAME_RE.match(b):
            problems.append(f"backend {b!r}: a backend's name (local, ray, slurm)")
    roots = []
    for root in data_roots:
        real = os.path.realpath(os.path.expanduser(root))
        if not os.path.isabs(os.path.expanduser(root)) or not os.path.isdir(real):
            problems.append(f"data root {root!r}: an existing folder, as an absolute path")
        roots.append(real)
    readable = list(dict.fromkeys(read_projects))
    for p in readable:
        if p != "*" and not NAME_RE.match(p):
            problems.append(f"read project {p!r}: a project's name, or '*' for every one")
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
        " created_at, backends, unsandboxed, data_roots, read_projects)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            name,
            token_hash(token),
            project,
            max_gpus,
            priority_max,
            int(admin),
            time.time(),
            ",".join(backends),
            int(unsandboxed),
            json.dumps(roots),
            json.dumps(readable),
        ),
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
        " AND status IN ('QUEUED','RUNNING')) AS gpus_in_use,"
        f" {_RIGHTS} FROM identities ORDER BY name"
    ).fetchall()
    keys = ("name", "project", "max_gpus", "priority_max", "admin", "created_at", "revoked_at")
    out = []
    for r in rows:
        item = dict(zip(keys, r[:7], strict=True))
        item["admin"] = bool(item["admin"])
        item["gpus_in_use"] = r[7]
        backends, unsandboxed, roots, readable = _rights(r[8:12])
        item.update(
            backends=list(backends),
            unsandboxed=unsandboxed,
            data_roots=list(roots),
            read_projects=list(readable),
        )
        out.append(item)
    return out


_RIGHTS = "backends, unsandboxed, data_roots, read_projects"


def _rights(
    cols: Any,
) -> tuple[tuple[str, ...], bool, tuple[str, ...], tuple[str, ...]]:
    """The rights columns of a row, parsed (a row from before them has the safe defaults)."""
    backends, unsandboxed, roots, readable = cols

    def listed(text: str | None) -> tuple[str, ...]:
        try:
            value = json.loads(text or "[]")
        except ValueError:
            return ()
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    names = tuple(b for b in (backends or "local").split(",") if b)
    return names or ("local",), bool(unsandboxed), listed(roots), listed(readable)


def for_token(c: sqlite3.Connection, token: str) -> Identity | None:
    """The active identity whose token this is; None for any other string."""
    digest = token_hash(token.strip())
    row = c.execute(
        f"SELECT name, project, max_gpus, priority_max, admin, token_hash, {_RIGHTS}"
        " FROM identities WHERE token_hash=? AND revoked_at IS NULL",
        (digest,),
    ).fetchone()
    if row is None or not hmac.compare_digest(row[5], digest):
        return None
    backends, unsandboxed, roots, readable = _rights(row[6:10])
    return Identity(
        row[0], row[1], row[2], row[3], bool(row[4]), backends, unsandboxed, roots, readable
    )


def check_launch(
    c: sqlite3.Connection, spec: Any, launched_by: str | None, asked: str | None
) -> None:
    """Inside the queueing transaction: an identity's job stays within its token's limits."""
    if not launched_by:
        return
    row = c.execute(
        f"SELECT project, max_gpus, priority_max, revoked_at, {_RIGHTS} FROM identities"
        " WHERE name=?",
        (launched_by,),
    ).fetchone()
    if row is None:  # the local user, or a name no token holds: no limits of an identity
        return
    project, max_gpus, priority_max, revoked_at = row[:4]
    if revoked_at is not None:
        raise Forbidden(
            f"the token of {launched_by!r} was revoked", hint="ask the pool's owner for a new one"
        )
    backends, unsandboxed, roots, _ = _rights(row[4:8])
    check_rights(
        Identity(launched_by, project, None, "high", False, backends, unsandboxed, roots), spec
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


# Backends that run a job without air's sandbox (Ray's workers run it as they are).
UNSANDBOXED_BACKENDS = frozenset({"ray"})


def roots_of(who: Identity, environ: Mapping[str, str] | None = None) -> list[str]:
    """The folders an identity's jobs may use (real paths): its own, else AIR_DATA_ROOTS."""
    if who.data_roots:
        return list(who.data_roots)
    from air_skills import settings

    text = settings.raw("AIR_DATA_ROOTS", environ) or ""
    return [os.path.realpath(os.path.expanduser(p)) for p in text.split(os.pathsep) if p.strip()]


def _under(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def check_rights(who: Identity, spec: Mapping[str, Any], home: str | None = None) -> None:
    """An identity's job stays within its rights (module docstring): one ``forbidden`` naming
    every field it may not ask for. ``spec`` as JSON data (workdir resolved or not). With
    ``home`` (AIR_HOME), no folder of the job may lie in it: a snapshot of that workdir would
    copy the store and the agents' token files into the job's view."""
    problems: list[str] = []
    if home is not None:
        inside_home = [os.fspath(os.path.realpath(home))]
        named = [
            ("workdir", spec.get("workdir")),
            *(("writable", p) for p in spec.get("writable") or ()),
        ]
        for what, path in named:
            if path and _under(str(path), inside_home):
                problems.append(f"{what} {path} inside AIR_HOME")
    backend = spec.get("backend") or "local"
    if backend not in who.backends:
        problems.append(f"backend {backend!r} (it may use: {', '.join(who.backends)})")
    if not who.unsandboxed:
        if backend in UNSANDBOXED_BACKENDS:
            problems.append(f"backend {backend!r}, which runs jobs without a sandbox")
        if spec.get("sandbox") == "off":
            problems.append("sandbox: off")
        if spec.get("code") == "live":
            problems.append("code: live (its job would run in the folder itself)")
    roots = roots_of(who)
    said = f"its data roots ({', '.join(roots)})" if roots else "its data roots (it has none)"
    workdir = spec.get("workdir")
    if workdir and roots and not _under(str(workdir), roots):
        problems.append(f"workdir {workdir} outside {said}")
    for path in spec.get("writable") or ():
        if not who.unsandboxed and not _under(str(path), roots):
            problems.append(f"writable {path} outside {said}")
    for item in spec.get("data") or ():
        path = item.get("path") if isinstance(item, Mapping) else None
        if path and roots and not _under(str(path), roots):
            problems.append(f"data {path} outside {said}")
    if problems:
        raise Forbidden(
            f"{who.name!r} may not ask for: " + "; ".join(problems),
            hint="drop those fields (a job of this token runs sandboxed, on its granted"
            " backends, under its data roots), or ask the pool's owner to grant more"
            " (`air mcp-token add --backend B --allow-unsandboxed --data-root DIR`)",
        )
