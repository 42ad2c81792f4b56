"""The scheduler: a pure function from (queued, running, inventory, now) to decisions.

Order: priority (high > normal > low), then submission order. A job that cannot start may
preempt ``preemptible`` running jobs of lower priority, or reclaim its project's quota from
jobs of other projects that are borrowing idle GPUs. Smaller jobs backfill GPUs that the head
of the queue cannot use yet, without starving it: once a blocked job has waited longer than
``starvation_s`` (or, when every running job has a time limit, from the moment it is blocked:
EASY backfill), it reserves GPUs and backfill may only use what it does not need.

Bounded bypass (``Inventory.bypass_jobs``, N): a job submitted at most N jobs after a reserving
head (``seq <= head.seq + N``) may still take the GPUs held for it. Without time limits this
keeps small jobs flowing past a head that needs the whole machine, yet it cannot starve the
head: only a fixed, finite set of jobs may ever overtake it (each at most once per retry), and
every later one waits behind it. 0 (the default) is strict: the age limit alone. A head reserved
by EASY (every end known) is never bypassed this way.

Learned estimates (runtime/store/estimates.py: ``QueuedJob.learned``, ``RunningJob.end_guessed``)
are used as time limits are, for the head's shadow time and for backfill, except that nothing
stops a job at its guess. So while any running job is past its guessed end (guesses are failing), a
job whose duration is only guessed never overtakes a head that has waited ``starvation_s``. A
guessed job that passes an aged head was expected to end before the head's start; if it runs
over, no further guess passes until it ends, so the head is delayed by at most the overruns of
the guessed jobs already running, never by a stream of later ones: the age limit stays a bound.

Quotas (``Inventory.quotas``, GPUs per project), after Kueue's nominal quota and borrowing:

- each project with a quota is guaranteed that many GPUs; the projects without one share,
  as one group, what the quotas leave of the pool (all of it when no quota is set);
- a job that would take its group beyond its quota may still start on idle GPUs, as a
  best-effort **borrowing** job; jobs within quota are placed first in every pass;
- a job within its quota that cannot start reclaims GPUs from other groups' borrowing jobs
  (they are requeued); a group's jobs within quota are never preempted by another group;
- within a group, priority and age decide as without quotas: lower-priority ``preemptible``
  jobs give way to higher-priority ones.

Which running jobs count as borrowing is recomputed every pass (a group's jobs fill its quota
by priority, then start time), so a borrower becomes a regular job once its group's earlier
jobs end; ``Decision.relabels`` reports such changes.

Jobs with ``gpus == 0`` run on CPU slots (``cpu_slots`` at once), never touch GPUs and do not
count against quotas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SHARED = ""  # the group of every project without a quota


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    gpus: int
    priority: int  # 0 low, 1 normal, 2 high
    seq: int  # submission order
    queued_at: float
    project: str = "default"
    duration_est_s: float | None = None  # timeout_min, if any: an upper bound
    learned: bool = False  # duration_est_s is a guess from the job's class, not its time limit


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    gpus: tuple[int, ...]
    priority: int
    preemptible: bool
    started_at: float
    project: str = "default"
    borrowing: bool = False  # as recorded; the scheduler recomputes it (Decision.relabels)
    stopping: bool = False  # already asked to stop: its GPUs free up soon
    expected_end: float | None = None
    end_guessed: bool = False  # expected_end is a learned guess: the job may run past it


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[int, ...]  # schedulable GPUs: present, healthy, not cordoned
    cpu_slots: int = 2
    quotas: dict[str, int] = field(default_factory=dict)  # project -> guaranteed GPUs
    starvation_s: float = 30.0
    bypass_jobs: int = 0  # jobs submitted after a reserving head that may still overtake it


@dataclass(frozen=True)
class Start:
    job_id: str
    gpus: tuple[int, ...]
    borrowing: bool = False


@dataclass
class Decision:
    starts: list[Start] = field(default_factory=list)
    preempts: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # why a queued job still waits
    preempt_reasons: dict[str, str] = field(default_factory=dict)  # why a running job is stopped
    relabels: dict[str, bool] = field(default_factory=dict)  # running job -> borrowing, if changed


def group_quotas(inv: Inventory) -> dict[str, int]:
    """GPUs guaranteed to each quota group; the shared group gets what the quotas leave."""
    if not inv.quotas:
        return {}
    out = dict(inv.quotas)
    out[SHARED] = max(0, len(inv.gpus) - sum(inv.quotas.values()))
    return out


def group_of(project: str, inv: Inventory) -> str:
    return project if project in inv.quotas else SHARED


def borrowing_labels(running: list[RunningJob], inv: Inventory) -> dict[str, bool]:
    """Which running jobs are beyond their group's quota: each group's jobs fill its quota in
    order of priority, then start time; the rest borrow. Jobs already stopping keep their label
    and count for nothing (their GPUs are on their way back)."""
    quotas = group_quotas(inv)
    labels = {r.job_id: False for r in running}
    if not quotas:
        return labels
    used: dict[str, int] = {}
    for r in sorted(running, key=lambda r: (-r.priority, r.started_at, r.job_id)):
        if r.stopping:
            labels[r.job_id] = r.borrowing
            continue
        if not r.gpus:
            continue
        g = group_of(r.project, inv)
        if used.get(g, 0) + len(r.gpus) <= quotas[g]:
            used[g] = used.get(g, 0) + len(r.gpus)
        else:
            labels[r.job_id] = True
    return labels


def schedule(
    queued: list[QueuedJob], running: list[RunningJob], inv: Inventory, now: float
) -> Decision:
    """Decide which queued jobs start now (and on which GPUs) and which running jobs to preempt."""
    decision = Decision()
    pool = set(inv.gpus)
    quotas = group_quotas(inv)
    labels = borrowing_labels(running, inv)
    decision.relabels = {
        r.job_id: labels[r.job_id] for r in running if labels[r.job_id] != r.borrowing
    }
    held = {g for r in running for g in r.gpus}
    free = sorted(pool - held)
    cpu_free = inv.cpu_slots - sum(1 for r in running if not r.gpus)
    reserved: set[int] = set()
    head_reserved: set[int] = set()  # the part of ``reserved`` held for the blocked head
    victims_taken: set[str] = {r.job_id for r in running if r.stopping}
    # GPUs of jobs already asked to stop: claimed, in queue order, by the jobs that wait for them
    # (so a waiting job does not preempt a second round of victims).
    incoming = [g for r in running if r.stopping for g in r.gpus if g in pool]
    # Only preemptible or borrowing jobs can ever be taken: without any, skip the search.
    takeable = any(r.gpus and (r.preemptible or labels[r.job_id]) for r in running)
    order = sorted(queued, key=lambda q: (-q.priority, q.seq))
    within, used = _classify(order, running, labels, inv, quotas)
    # Jobs within their quota are placed first; borrowers get what is idle after them.
    order = [j for j in order if within[j.job_id]] + [j for j in order if not within[j.job_id]]
    head_blocked_at: float | None = None  # EASY: shadow time of the first blocked GPU job
    head_extra = 0  # GPUs the head will not need at its shadow time: open to longer jobs
    head_seq: int | None = None  # bounded bypass: jobs up to head_seq + bypass_jobs may overtake
    head_aged = False  # the head has waited starvation_s: guesses pass it only while none fail
    starting: list[tuple[float | None, int]] = []  # (expected end, GPUs) of this pass's starts
    # A GPU job without a time limit makes every shadow time unknown: no need to compute one.
    end_unknown = any(r.gpus and r.expected_end is None for r in running)
    # A running job past its guessed end: guesses are failing, none may pass an aged head now.
    overdue = any(_overdue(r, now) for r in running)

    for job in order:
        if job.gpus == 0:
            if cpu_free > 0:
                decision.starts.append(Start(job.job_id, ()))
                cpu_free -= 1
            else:
                decision.reasons[job.job_id] = (
                    f"waiting for a CPU slot (all {inv.cpu_slots} in use; AIR_CPU_SLOTS sets"
                    " how many; list_gpus shows capacity)"
                )
            continue
        if job.gpus > len(pool):
            decision.reasons[job.job_id] = (
                f"needs {job.gpus} GPUs; {len(pool)} schedulable (others cordoned or missing)"
            )
            continue
        borrowing = not within[job.job_id]
        available = [g for g in free if g not in reserved]
        guess_barred = job.learned and head_aged and overdue
        short = head_blocked_at is not None and (
            (_may_backfill(job, now, head_blocked_at) and not guess_barred)
            or (head_seq is not None and job.seq <= head_seq + inv.bypass_jobs)
        )
        if short:
            # EASY: a job that ends before the head's start may use the head's reservation;
            # so may one of the bounded set submitted just after a head reserved by age.
            available = [g for g in free if g not in reserved or g in head_reserved]
        fits_now = len(available) >= job.gpus
        if fits_now and head_blocked_at is not None and not short:
            # One that may run past the head's start gets only GPUs the head will not need.
            fits_now = job.gpus <= head_extra
            head_extra -= job.gpus if fits_now else 0
        if fits_now:
            chosen = tuple(available[: job.gpus])
            decision.starts.append(Start(job.job_id, chosen, borrowing))
            free = [g for g in free if g not in chosen]
            est = job.duration_est_s
            starting.append((None if est is None else now + est, job.gpus))
            end_unknown = end_unknown or est is None
            continue

        # Blocked. GPUs already on their way back come first, then preemption or reclaim.
        if incoming and len(available) + len(incoming) >= job.gpus:
            take = job.gpus - len(available)
            reserved.update(available)
            incoming = incoming[take:]
            decision.reasons[job.job_id] = "waiting for preempted jobs to release their GPUs"
            continue
        victims = None
        if takeable:
            victims = _pick_victims(
                job, running, labels, victims_taken, available, not borrowing, inv
            )
        if victims is not None:
            for v in victims:
                decision.preempts.append(v.job_id)
                decision.preempt_reasons[v.job_id] = _preempt_reason(
                    job, v, not borrowing, labels, inv
                )
                victims_taken.add(v.job_id)
                reserved.update(v.gpus)
            reserved.update(available[: max(0, job.gpus - sum(len(v.gpus) for v in victims))])
            decision.reasons[job.job_id] = "preempting " + ", ".join(v.job_id for v in victims)
            continue
        waited = now - job.queued_at
        shadow = None
        if head_blocked_at is None and not end_unknown:
            shadow = _expected_free_at(job.gpus, available, running, now, starting)
        if head_blocked_at is None and (shadow is not None or waited >= inv.starvation_s):
            # The first such job is the head: it reserves GPUs so that backfill cannot starve
            # it. When every running job's end is known (EASY), it holds only what it will not
            # have anyway at its shadow time; the extra stays open to jobs that run past it.
            head_blocked_at, free_then = shadow or (float("inf"), 0)
            head_aged = waited >= inv.starvation_s
            if shadow is None and inv.bypass_jobs > 0:
                head_seq = job.seq  # reserved by age: open to the next bypass_jobs submissions
            head_extra = max(0, free_then - job.gpus)
            keep = available[: max(0, len(available) - head_extra)]
            reserved.update(keep)
            head_reserved.update(keep)
        free_total = len([g for g in free if g not in reserved])
        reason = f"waiting for {job.gpus} GPUs; {free_total} free of {len(pool)}"
        if borrowing:
            g = group_of(job.project, inv)
            who = f"project {job.project}" if g != SHARED else "projects without a quota"
            reason += (
                f"; {who} at quota ({used.get(g, 0)}/{quotas[g]} GPUs), so it starts only on"
                " idle GPUs (borrowing)"
            )
        decision.reasons[job.job_id] = reason
    return decision


def _classify(
    order: list[QueuedJob],
    running: list[RunningJob],
    labels: dict[str, bool],
    inv: Inventory,
    quotas: dict[str, int],
) -> tuple[dict[str, bool], dict[str, int]]:
    """Which queued jobs fit in their group's quota (in queue order), and each group's use.

    A job within quota keeps its share of the quota while it waits, so a later job of the same
    group is not counted within quota on the same GPUs.
    """
    if not quotas:
        return {j.job_id: True for j in order}, {}
    used: dict[str, int] = {}
    for r in running:
        if r.gpus and not r.stopping and not labels[r.job_id]:
            g = group_of(r.project, inv)
            used[g] = used.get(g, 0) + len(r.gpus)
    running_use = dict(used)
    within: dict[str, bool] = {}
    for job in order:
        if job.gpus == 0:
            within[job.job_id] = True
            continue
        g = group_of(job.project, inv)
        fits = job.gpus <= len(inv.gpus) and used.get(g, 0) + job.gpus <= quotas[g]
        within[job.job_id] = fits
        if fits:
            used[g] = used.get(g, 0) + job.gpus
    return within, running_use


def _preempt_reason(
    job: QueuedJob, victim: RunningJob, within: bool, labels: dict[str, bool], inv: Inventory
) -> str:
    if (
        within
        and inv.quotas
        and labels[victim.job_id]
        and group_of(victim.project, inv) != group_of(job.project, inv)
    ):
        return (
            f"preempted: project {job.project} reclaimed its GPU quota (this job was borrowing"
            f" idle GPUs beyond project {victim.project}'s quota)"
        )
    return "preempted for a higher-priority job"


def _may_backfill(job: QueuedJob, now: float, shadow: float) -> bool:
    """EASY backfill: a job may jump a reserved head only if it ends before the head starts.

    Never before a head whose start is unknown (a running job without a time limit): any job
    could delay it, and a stream of jobs with time limits would starve it.
    """
    return job.duration_est_s is not None and now + job.duration_est_s <= shadow < float("inf")


def _overdue(r: RunningJob, now: float) -> bool:
    """A running GPU job past its guessed end (a time limit's end is enforced, not guessed)."""
    return bool(r.gpus) and r.end_guessed and r.expected_end is not None and r.expected_end < now


def _expected_free_at(
    need: int,
    available: list[int],
    running: list[RunningJob],
    now: float,
    starting: Sequence[tuple[float | None, int]] = (),
) -> tuple[float, int] | None:
    """(when ``need`` GPUs will be free, how many are free then), if every GPU job has a
    time limit; None if one has not.

    ``starting``: (expected end, GPUs) of the jobs that this pass starts: they hold GPUs too.
    """
    holders = [(r.expected_end, len(r.gpus)) for r in running if r.gpus] + list(starting)
    ends: list[tuple[float, int]] = []
    for end, n in holders:
        if end is None:
            return None
        ends.append((end, n))
    ends.sort()
    count = len(available)
    for i, (end, n) in enumerate(ends):
        count += n
        if count >= need:
            # Jobs that end at the same moment free their GPUs together.
            count += sum(m for e, m in ends[i + 1 :] if e == end)
            return max(end, now), count
    return None


def _pick_victims(
    job: QueuedJob,
    running: list[RunningJob],
    labels: dict[str, bool],
    taken: set[str],
    available: list[int],
    within_quota: bool,
    inv: Inventory,
) -> list[RunningJob] | None:
    """The fewest, cheapest running jobs whose GPUs let ``job`` start; None if impossible.

    Another group's jobs are candidates only while they borrow: a job within its quota reclaims
    them whatever their priority; a borrowing job may take them only by priority (preemptible,
    lower). Within the job's own group, priority alone decides, as without quotas.
    """
    pool = set(inv.gpus)
    own = group_of(job.project, inv)

    def eligible(r: RunningJob) -> bool:
        if r.job_id in taken or not r.gpus:
            return False
        by_priority = r.preemptible and r.priority < job.priority
        if not inv.quotas or group_of(r.project, inv) == own:
            return by_priority
        if not labels[r.job_id]:
            return False  # another group's jobs within quota are never taken
        return within_quota or by_priority

    candidates = sorted(
        (r for r in running if eligible(r)),
        # borrowers first, then lowest priority, then the most recently started (least lost)
        key=lambda r: (not labels[r.job_id], r.priority, -r.started_at),
    )
    need = job.gpus - len(available)
    chosen: list[RunningJob] = []
    for r in candidates:
        if need <= 0:
            break
        usable = len([g for g in r.gpus if g in pool])
        if usable == 0:
            continue
        chosen.append(r)
        need -= usable
    return chosen if need <= 0 and chosen else None
