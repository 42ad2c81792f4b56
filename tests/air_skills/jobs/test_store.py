"""The store: WAL mode, named transitions, terminal states that never change."""

from __future__ import annotations

import threading
from pathlib import Path

from air_skills.models import JobSpec
from air_skills.runtime.store.store import Store, new_job_id
from air_skills.status import JobStatus


def queued(store: Store) -> str:
    job_id = new_job_id()
    spec = JobSpec(command=["true"], track=False)
    store.queue(spec.model_dump(mode="json"), job_id, "/dev/null", "t", project="default")
    return job_id


def test_wal_mode(tmp_path: Path) -> None:
    store = Store(tmp_path)
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_terminal_state_is_never_rewritten(tmp_path: Path) -> None:
    store = Store(tmp_path)
    job_id = queued(store)
    assert store.finish(job_id, JobStatus.CANCELLED, message="cancelled")
    assert not store.finish(job_id, JobStatus.SUCCEEDED, message="late")
    with store.tx() as c:
        assert not store.mark_running(c, job_id, [0], 1, False)
    assert not store.requeue(job_id, message="x", kind="infra")
    row = store.row(job_id)
    assert row.status == "CANCELLED" and row.message == "cancelled"


def test_race_between_finishers(tmp_path: Path) -> None:
    """Many threads (each with its own connection) race to finish one job: exactly one wins."""
    job_id = queued(Store(tmp_path))
    statuses = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT]
    results: list[tuple[JobStatus, bool]] = []
    barrier = threading.Barrier(16)

    def finish(i: int) -> None:
        store = Store(tmp_path)
        barrier.wait()
        status = statuses[i % 4]
        results.append((status, store.finish(job_id, status, message=status.value)))

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [s for s, won in results if won]
    assert len(winners) == 1
    row = Store(tmp_path).row(job_id)
    assert row.status == winners[0].value and row.message == winners[0].value


def test_events_record_history(tmp_path: Path) -> None:
    store = Store(tmp_path)
    job_id = queued(store)
    with store.tx() as c:
        store.mark_running(c, job_id, [1], 1, False)
    store.requeue(job_id, message="fault", kind="infra")
    kinds = [e["kind"] for e in store.events(job_id)]
    assert kinds == ["queued", "started", "requeued-infra"]
    row = store.row(job_id)
    assert row.status == "QUEUED" and row.infra_retries == 1 and row.attempts == 1


def test_corrupt_database_message(tmp_path: Path) -> None:
    (tmp_path / "air.db").write_bytes(b"garbage" * 1000)
    try:
        Store(tmp_path)
    except Exception as exc:
        assert getattr(exc, "code", "") == "store-error"
        assert "corrupt" in exc.hint  # type: ignore[attr-defined]
    else:
        raise AssertionError("a corrupt database was accepted")
