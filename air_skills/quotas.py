"""Per-project GPU quotas: set, remove and list them; the scheduler enforces them.

A project with a quota is guaranteed that many GPUs; beyond it, its jobs borrow idle GPUs
and are the first preempted when another project reclaims its own quota. Projects without a
quota share what the quotas leave of the pool. Quotas may add up to more than the pool (a
warning, not an error): borrowing and reclaim sort it out. See
``air_skills.runtime.scheduling.scheduler``.
Functions over the store: the caller settles the jobs first (``Client.reconcile``) where the
answer depends on which jobs still run.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from air_skills.errors import InvalidInput, NotFound
from air_skills.gpu.providers import provider
from air_skills.runtime.scheduling import passes
from air_skills.vocabulary import NAME_RE

if TYPE_CHECKING:
    from air_skills.runtime.store.store import Store

MAX_QUOTA_GPUS = 1_000_000


def known_projects(store: Store) -> list[str]:
    """Projects with a quota or with jobs, and ``default``."""
    return sorted({"default", *store.quotas(), *store.job_projects()})


def _near(name: str, known: list[str]) -> str | None:
    """The known project that ``name`` most likely misspells (case-insensitive), if any."""
    lowered = {k.lower(): k for k in known if k != name}
    hit = difflib.get_close_matches(name.lower(), list(lowered), n=1)
    return lowered[hit[0]] if hit else None


def check_project(store: Store, project: str) -> str:
    """``project`` if known; else NotFound that lists the known projects (and a near match)."""
    known = known_projects(store)
    if project in known:
        return project
    near = _near(project, known)
    raise NotFound(
        f"no project {project!r}; known projects: {', '.join(known)}",
        hint=(f"did you mean {near!r}? " if near else "")
        + "a project exists once it has a quota (`air quota set`) or a job (--project)",
        valid_keys=known,
        project=project,
    )


def _pool_size() -> int:
    return len(provider().devices())


def set_quota(store: Store, project: str, gpus: int) -> dict[str, Any]:
    """Give ``project`` a quota of ``gpus`` GPUs (0: it only ever borrows); a new name creates
    the project. Returns the project, its quota and the previous one, with a ``warning`` when
    the quotas add up to more than the pool or the name looks like a typo of a known project.
    A scheduling pass follows at once: a raised quota may reclaim GPUs now."""
    problems = []
    if not isinstance(project, str) or not NAME_RE.match(project):
        problems.append(
            f"project {project!r}: 1-64 letters, digits, '_', '.', '-' (a letter or digit first)"
        )
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= MAX_QUOTA_GPUS:
        problems.append(f"gpus {gpus!r}: give a whole number of GPUs, 0 or more")
    if problems:
        raise InvalidInput(
            "invalid quota: " + "; ".join(problems),
            hint="air quota set PROJECT --gpus N",
            problems=problems,
        )
    known = known_projects(store)
    quotas = store.quotas()
    previous = quotas.get(project)
    store.set_quota(project, gpus)
    quotas[project] = gpus
    pool = _pool_size()
    warnings = []
    total = sum(quotas.values())
    if total > pool:
        warnings.append(
            f"quotas add up to {total} GPUs, more than the {pool} in the pool: accepted, but a"
            " project may wait for its quota until borrowers are preempted or jobs end"
        )
    if project not in known:
        near = _near(project, known)
        if near:
            warnings.append(f"{project!r} is a new project; did you mean {near!r}?")
    passes.schedule_pass(store)
    result: dict[str, Any] = {
        "project": project,
        "quota": gpus,
        "previous": previous,
        "pool": pool,
        "quota_total": total,
    }
    if warnings:
        result["warning"] = "; ".join(warnings)
    return result


def remove_quota(store: Store, project: str) -> dict[str, Any]:
    """Drop ``project``'s quota: its jobs then share what the quotas leave of the pool."""
    quotas = store.quotas()
    if project not in quotas:
        check_project(store, project)  # unknown: NotFound listing the known projects
        raise NotFound(
            f"project {project!r} has no quota; projects with one:"
            f" {', '.join(sorted(quotas)) or 'none'}",
            hint="list them with `air quota ls`",
            valid_keys=sorted(quotas),
            project=project,
        )
    store.remove_quota(project)
    passes.schedule_pass(store)
    return {"project": project, "quota": None, "previous": quotas[project]}


def list_quotas(store: Store) -> list[dict[str, Any]]:
    """One row per project with a quota or with live jobs: ``project``, ``quota`` (None: it
    shares what the quotas leave), ``in_use`` (GPUs its running jobs hold), ``borrowing`` (how
    many of those are beyond its quota), ``queued`` (jobs waiting) and ``queued_gpus``. Settle
    the jobs first (``Client.reconcile``): the counts are read as the store has them."""
    quotas = store.quotas()
    rows: dict[str, dict[str, Any]] = {
        p: {"project": p, "quota": q, "in_use": 0, "borrowing": 0, "queued": 0, "queued_gpus": 0}
        for p, q in quotas.items()
    }
    live = store.live_rows()
    for r in live:
        row = rows.setdefault(
            r.project,
            {
                "project": r.project,
                "quota": None,
                "in_use": 0,
                "borrowing": 0,
                "queued": 0,
                "queued_gpus": 0,
            },
        )
        if r.status == "RUNNING":
            n = len(r.gpu_list())
            row["in_use"] += n
            if r.borrowing:
                row["borrowing"] += n
        else:
            row["queued"] += 1
            row["queued_gpus"] += r.gpus_requested
    return sorted(rows.values(), key=lambda r: (r["quota"] is None, r["project"]))


def shared_gpus(store: Store) -> int:
    """GPUs that the projects without a quota share: the pool less every quota."""
    return max(0, _pool_size() - sum(store.quotas().values()))
