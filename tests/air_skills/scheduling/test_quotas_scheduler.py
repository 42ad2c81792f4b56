"""Quotas in the pure scheduler: guarantees, borrowing of idle GPUs, reclaim, shared rest."""

from __future__ import annotations

from air_skills.runtime.scheduling.scheduler import (
    Decision,
    Inventory,
    QueuedJob,
    RunningJob,
    borrowing_labels,
    group_quotas,
    schedule,
)

LOW, NORMAL, HIGH = 0, 1, 2
AB = Inventory(gpus=(0, 1, 2, 3), quotas={"A": 2, "B": 2})


def q(job_id: str, project: str, gpus: int = 1, priority: int = NORMAL, seq: int = 0) -> QueuedJob:
    return QueuedJob(job_id, gpus, priority, seq, queued_at=0.0, project=project)


def r(
    job_id: str,
    project: str,
    gpus: tuple[int, ...],
    priority: int = NORMAL,
    preemptible: bool = False,
    started_at: float = 0.0,
    **kw: object,
) -> RunningJob:
    return RunningJob(job_id, gpus, priority, preemptible, started_at, project=project, **kw)  # type: ignore[arg-type]


def starts(d: Decision) -> dict[str, bool]:
    """job id -> borrowing, for every start."""
    return {s.job_id: s.borrowing for s in d.starts}


def test_a_alone_borrows_every_idle_gpu() -> None:
    d = schedule([q(f"a{i}", "A", seq=i) for i in range(4)], [], AB, now=0)
    assert starts(d) == {"a0": False, "a1": False, "a2": True, "a3": True}
    assert sorted(g for s in d.starts for g in s.gpus) == [0, 1, 2, 3]


def test_b_reclaims_only_what_a_borrows() -> None:
    running = [
        r("a0", "A", (0,), started_at=1),
        r("a1", "A", (1,), started_at=2),
        r("a2", "A", (2,), started_at=3, borrowing=True),
        r("a3", "A", (3,), started_at=4, borrowing=True),
    ]
    d = schedule([q("b0", "B", seq=10), q("b1", "B", seq=11)], running, AB, now=5)
    assert sorted(d.preempts) == ["a2", "a3"]
    assert d.starts == []
    for victim in ("a2", "a3"):
        assert "project B reclaimed its GPU quota" in d.preempt_reasons[victim]
    # One victim per B job: the first takes the most recent borrower.
    assert d.reasons["b0"] == "preempting a3" and d.reasons["b1"] == "preempting a2"


def test_quota_jobs_are_never_preempted_by_another_project() -> None:
    """A's jobs within quota stay, whatever B's priority and however preemptible they are."""
    running = [
        r("a0", "A", (0,), priority=LOW, preemptible=True),
        r("a1", "A", (1,), priority=LOW, preemptible=True),
        r("b0", "B", (2,)),
        r("b1", "B", (3,)),
    ]
    d = schedule([q("b2", "B", priority=HIGH, seq=9)], running, AB, now=1)
    assert d.preempts == [] and d.starts == []
    assert "borrowing" in d.reasons["b2"] and "2/2" in d.reasons["b2"]


def test_waiting_for_reclaimed_gpus_does_not_preempt_twice() -> None:
    running = [
        r("a0", "A", (0,)),
        r("a1", "A", (1,)),
        r("a2", "A", (2,), borrowing=True, stopping=True),
        r("a3", "A", (3,), borrowing=True, stopping=True),
    ]
    d = schedule([q("b0", "B", seq=10), q("b1", "B", seq=11)], running, AB, now=5)
    assert d.preempts == []
    assert all("release their GPUs" in d.reasons[j] for j in ("b0", "b1"))


def test_quota_jobs_go_before_older_borrowers() -> None:
    """A's preempted borrowers are older in the queue, yet B's jobs take the freed GPUs."""
    running = [r("a0", "A", (0,)), r("a1", "A", (1,))]
    queued = [q("a2", "A", seq=2), q("a3", "A", seq=3), q("b0", "B", seq=10), q("b1", "B", seq=11)]
    d = schedule(queued, running, AB, now=5)
    assert starts(d) == {"b0": False, "b1": False}
    assert "borrowing" in d.reasons["a2"]


def test_borrower_of_higher_priority_still_waits_behind_quota() -> None:
    running = [r("a0", "A", (0,)), r("a1", "A", (1,)), r("b0", "B", (2,))]
    queued = [q("a2", "A", priority=HIGH, seq=1), q("b1", "B", priority=LOW, seq=2)]
    d = schedule(queued, running, AB, now=0)
    assert starts(d) == {"b1": False}  # B's guaranteed GPU; A's high job is over its quota


def test_within_a_project_priority_preempts_as_before() -> None:
    running = [
        r("a0", "A", (0,), priority=LOW, preemptible=True, started_at=1),
        r("a1", "A", (1,), priority=LOW, preemptible=True, started_at=2),
        r("b0", "B", (2,)),
        r("b1", "B", (3,)),
    ]
    d = schedule([q("a2", "A", priority=HIGH, seq=5)], running, AB, now=3)
    assert d.preempts == ["a1"]  # own project, lower priority, preemptible; the youngest
    assert d.preempt_reasons["a1"] == "preempted for a higher-priority job"


def test_borrowers_take_each_other_by_priority_only() -> None:
    """Over quota, a high job may take a low preemptible borrower of another project."""
    running = [
        r("a0", "A", (0,)),
        r("a1", "A", (1,)),
        r("a2", "A", (2,), priority=LOW, preemptible=True, borrowing=True),
        r("a3", "A", (3,), priority=LOW, preemptible=False, borrowing=True),
        r("b0", "B", (), priority=NORMAL),  # a CPU job: counts for nothing
    ]
    inv = Inventory(gpus=(0, 1, 2, 3), quotas={"A": 2, "B": 0})
    d = schedule([q("b1", "B", priority=HIGH, seq=9)], running, inv, now=1)
    assert d.preempts == ["a2"]
    assert d.preempt_reasons["a2"] == "preempted for a higher-priority job"


def test_projects_without_quota_share_what_is_left() -> None:
    inv = Inventory(gpus=tuple(range(6)), quotas={"A": 2})  # the rest, 4, is shared
    assert group_quotas(inv) == {"A": 2, "": 4}
    queued = [q(f"d{i}", "default", seq=i) for i in range(3)] + [
        q(f"c{i}", "C", seq=10 + i) for i in range(3)
    ]
    d = schedule(queued, [], inv, now=0)
    # 4 shared GPUs for default and C together (in queue order); 2 more idle: borrowed.
    assert starts(d) == {"d0": False, "d1": False, "d2": False, "c0": False, "c1": True, "c2": True}


def test_quota_project_reclaims_from_shared_borrowers() -> None:
    inv = Inventory(gpus=(0, 1, 2, 3), quotas={"A": 2})
    running = [r(f"d{i}", "default", (i,), started_at=i) for i in range(4)]
    labels = borrowing_labels(running, inv)
    assert labels == {"d0": False, "d1": False, "d2": True, "d3": True}
    d = schedule([q("a0", "A", seq=9)], running, inv, now=9)
    assert d.preempts == ["d3"]
    assert set(d.relabels) == {"d2", "d3"}  # recorded as not borrowing: now they are


def test_borrower_becomes_regular_when_its_project_frees_quota() -> None:
    running = [
        r("a0", "A", (0,), started_at=1),
        r("a2", "A", (2,), started_at=3, borrowing=True),
        r("a3", "A", (3,), started_at=4, borrowing=True),
    ]
    d = schedule([], running, AB, now=9)
    assert d.relabels == {"a2": False}  # a1 ended: the older borrower is within quota now


def test_priority_decides_who_borrows_within_a_project() -> None:
    running = [
        r("old-low", "A", (0,), priority=LOW, started_at=1),
        r("mid", "A", (1,), started_at=2),
        r("new-high", "A", (2,), priority=HIGH, started_at=3, borrowing=True),
    ]
    labels = borrowing_labels(running, AB)
    assert labels == {"old-low": True, "mid": False, "new-high": False}


def test_oversubscribed_quotas_wait_instead_of_preempting_quota_jobs() -> None:
    inv = Inventory(gpus=(0, 1, 2, 3), quotas={"A": 4, "B": 4})
    running = [r(f"a{i}", "A", (i,)) for i in range(4)]
    d = schedule([q("b0", "B", seq=9)], running, inv, now=1)
    assert d.preempts == [] and d.starts == []
    assert "waiting for 1 GPUs" in d.reasons["b0"]


def test_multi_gpu_job_beyond_quota_borrows_and_is_reclaimed_whole() -> None:
    d = schedule([q("big", "A", gpus=4)], [], AB, now=0)
    assert starts(d) == {"big": True}  # needs more than A's 2: can only ever borrow
    running = [r("big", "A", (0, 1, 2, 3), borrowing=True)]
    d = schedule([q("b0", "B", seq=2)], running, AB, now=1)
    assert d.preempts == ["big"]


def test_quota_zero_only_borrows() -> None:
    inv = Inventory(gpus=(0, 1), quotas={"A": 0, "B": 2})
    d = schedule([q("a0", "A"), q("b0", "B", seq=1)], [], inv, now=0)
    assert starts(d) == {"b0": False, "a0": True}


def test_no_quotas_means_no_borrowing() -> None:
    inv = Inventory(gpus=(0, 1))
    d = schedule([q(f"x{i}", f"P{i}", seq=i) for i in range(3)], [], inv, now=0)
    assert starts(d) == {"x0": False, "x1": False}
    assert "borrowing" not in d.reasons["x2"]


def test_cpu_jobs_ignore_quotas() -> None:
    inv = Inventory(gpus=(0,), cpu_slots=2, quotas={"A": 0})
    d = schedule([q("c0", "A", gpus=0), q("c1", "B", gpus=0, seq=1)], [], inv, now=0)
    assert starts(d) == {"c0": False, "c1": False}


def test_cordoned_gpus_shrink_the_shared_rest_not_the_quotas() -> None:
    inv = Inventory(gpus=(0, 1, 2), quotas={"A": 2})  # GPU 3 cordoned
    assert group_quotas(inv) == {"A": 2, "": 1}
