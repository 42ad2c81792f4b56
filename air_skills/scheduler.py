"""The scheduler: a pure function from (queued, running, inventory, now) to decisions.

Order: priority (high > normal > low), then submission order. A job that cannot start may
preempt ``preemptible`` running jobs of lower priority, or reclaim its project's quota from
jobs of other projects that are borrowing idle GPUs. Smaller jobs backfill GPUs that the head
of the queue cannot use yet, without starving it: once a blocked job has waited longer than
``starvation_s`` (or, when every running job has a time limit, from the moment it is blocked:
EASY backfill), it reserves GPUs and backfill may only use what it does not need.

Jobs with ``gpus == 0`` run on CPU slots (``cpu_slots`` at once) and never touch GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    gpus: int
    priority: int  # 0 low, 1 normal, 2 high
    seq: int  # submission order
    queued_at: float
    project: str = "default"
    duration_est_s: float | None = None  # timeout_min, if any: an upper bound


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    gpus: tuple[int, ...]
    priority: int
    preemptible: bool
    started_at: float
    project: str = "default"
    borrowing: bool = False
    stopping: bool = False  # already asked to stop: its GPUs free up soon
    expected_end: float | None = None


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[int, ...]  # schedulable GPUs: present, healthy, not cordoned
    cpu_slots: int = 2
    quotas: dict[str, int] = field(default_factory=dict)
    starvation_s: float = 30.0


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


def schedule(
    queued: list[QueuedJob], running: list[RunningJob], inv: Inventory, now: float
) -> Decision:
    """Decide which queued jobs start now (and on which GPUs) and which running jobs to preempt."""
    decision = Decision()
    pool = set(inv.gpus)
    held = {g for r in running for g in r.gpus}
    free = sorted(pool - held)
    cpu_free = inv.cpu_slots - sum(1 for r in running if not r.gpus)
    reserved: set[int] = set()
    head_reserved: set[int] = set()  # the part of ``reserved`` held for the blocked head
    usage: dict[str, int] = {}
    for r in running:
        if not r.borrowing and not r.stopping:
            usage[r.project] = usage.get(r.project, 0) + len(r.gpus)
    victims_taken: set[str] = {r.job_id for r in running if r.stopping}
    # GPUs of jobs already asked to stop: claimed, in queue order, by the jobs that wait for them
    # (so a waiting job does not preempt a second round of victims).
    incoming = [g for r in running if r.stopping for g in r.gpus if g in pool]
    order = sorted(queued, key=lambda q: (-q.priority, q.seq))
    head_blocked_at: float | None = None  # EASY: shadow time of the first blocked GPU job

    for job in order:
        if job.gpus == 0:
            if cpu_free > 0:
                decision.starts.append(Start(job.job_id, ()))
                cpu_free -= 1
            else:
                decision.reasons[job.job_id] = "waiting for a CPU slot"
            continue
        if job.gpus > len(pool):
            decision.reasons[job.job_id] = (
                f"needs {job.gpus} GPUs; {len(pool)} schedulable (others cordoned or missing)"
            )
            continue
        within_quota = _within_quota(job, usage, inv.quotas)
        borrowing = bool(inv.quotas) and not within_quota
        available = [g for g in free if g not in reserved]
        if head_blocked_at is not None and _may_backfill(job, now, head_blocked_at):
            # EASY: a job that ends before the head's start may use the head's reservation.
            available = [g for g in free if g not in reserved or g in head_reserved]
        fits_now = len(available) >= job.gpus
        if fits_now and head_blocked_at is not None and not _may_backfill(job, now, head_blocked_at):
            fits_now = False
        if fits_now:
            chosen = tuple(available[: job.gpus])
            decision.starts.append(Start(job.job_id, chosen, borrowing))
            free = [g for g in free if g not in chosen]
            if not borrowing:
                usage[job.project] = usage.get(job.project, 0) + job.gpus
            continue

        # Blocked. GPUs already on their way back come first, then preemption or reclaim.
        if incoming and len(available) + len(incoming) >= job.gpus:
            take = job.gpus - len(available)
            reserved.update(available)
            incoming = incoming[take:]
            decision.reasons[job.job_id] = "waiting for preempted jobs to release their GPUs"
            continue
        victims = _pick_victims(job, running, victims_taken, available, within_quota, inv)
        if victims is not None:
            for v in victims:
                decision.preempts.append(v.job_id)
                victims_taken.add(v.job_id)
                reserved.update(v.gpus)
            reserved.update(available[: max(0, job.gpus - sum(len(v.gpus) for v in victims))])
            decision.reasons[job.job_id] = "preempting " + ", ".join(v.job_id for v in victims)
            continue
        waited = now - job.queued_at
        soon_free = _expected_free_at(job.gpus, available, running, now)
        if soon_free is not None or waited >= inv.starvation_s:
            # Reserve what is free now for this job so that backfill cannot starve it.
            reserved.update(available[: job.gpus])
            if head_blocked_at is None:
                head_blocked_at = soon_free if soon_free is not None else float("inf")
                head_reserved.update(available[: job.gpus])
        free_total = len([g for g in free if g not in reserved])
        decision.reasons[job.job_id] = (
            f"waiting for {job.gpus} GPUs; {free_total} free of {len(pool)}"
        )
    return decision


def _within_quota(job: QueuedJob, usage: dict[str, int], quotas: dict[str, int]) -> bool:
    if not quotas:
        return True
    quota = quotas.get(job.project)
    return quota is not None and usage.get(job.project, 0) + job.gpus <= quota


def _may_backfill(job: QueuedJob, now: float, shadow: float) -> bool:
    """EASY backfill: a job may jump a reserved head only if it ends before the head starts."""
    return job.duration_est_s is not None and now + job.duration_est_s <= shadow


def _expected_free_at(
    need: int, available: list[int], running: list[RunningJob], now: float
) -> float | None:
    """When ``need`` GPUs will be free, if every running GPU job has a time limit."""
    ends = sorted(
        (r.expected_end, len(r.gpus)) for r in running if r.gpus and r.expected_end is not None
    )
    if any(r.gpus and r.expected_end is None for r in running):
        return None
    count = len(available)
    for end, n in ends:
        count += n
        if count >= need:
            return max(end, now)  # type: ignore[type-var]
    return None


def _pick_victims(
    job: QueuedJob,
    running: list[RunningJob],
    taken: set[str],
    available: list[int],
    within_quota: bool,
    inv: Inventory,
) -> list[RunningJob] | None:
    """The fewest, cheapest running jobs whose GPUs let ``job`` start; None if impossible."""
    pool = set(inv.gpus)

    def eligible(r: RunningJob) -> bool:
        if r.job_id in taken or not r.gpus:
            return False
        if r.preemptible and r.priority < job.priority:
            return True
        # Quota reclaim: a job within its quota takes back GPUs lent to other projects.
        return within_quota and bool(inv.quotas) and r.borrowing and r.project != job.project

    candidates = sorted(
        (r for r in running if eligible(r)),
        # borrowers first, then lowest priority, then the most recently started (least lost)
        key=lambda r: (not r.borrowing, r.priority, -r.started_at),
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
