"""Job records: one typed field per ``jobs`` column, read by name whatever the table order."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from air_skills.models import JobSpec
from air_skills.runtime.store.records import JOB_COLUMNS, JOB_FIELDS, JobRecord
from air_skills.runtime.store.schema import _schema_columns
from air_skills.runtime.store.store import Store, new_job_id


def _queue(store: Store, **spec: object) -> str:
    job_id = new_job_id()
    data = JobSpec(command=["true"], track=False, **spec).model_dump(mode="json")  # type: ignore[arg-type]
    store.queue(data, job_id, "/dev/null", "t", project="default")
    return job_id


def test_fields_are_the_schema_columns_in_order() -> None:
    """A column added to the schema without its field (or a field without its column) fails."""
    assert JOB_FIELDS == tuple(_schema_columns()["jobs"])
    assert JOB_COLUMNS == ", ".join(_schema_columns()["jobs"])


def test_a_new_database_has_the_columns_in_field_order(tmp_path: Path) -> None:
    store = Store(tmp_path)
    assert tuple(r["name"] for r in store.conn.execute("PRAGMA table_info(jobs)")) == JOB_FIELDS


def test_from_row_reads_every_column(tmp_path: Path) -> None:
    """The record holds the stored values as ``SELECT *`` returns them, column by column."""
    store = Store(tmp_path)
    job_id = _queue(store, gpus=1, priority="high", config={"lr": 0.1})
    with store.tx() as c:
        assert store.mark_running(c, job_id, [2], 3, True)
    raw = store.conn.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
    record = store.row(job_id)
    assert record is not None
    # Every column as stored, but the log: always the job folder's own (issue 30), never a
    # path the database names.
    stored = {k: raw[k] for k in raw.keys()}
    assert dataclasses.asdict(record) == {**stored, "log_path": record.log_path}
    assert record.log_path == str(tmp_path / "jobs" / job_id / "output.log")
    assert record.status == "RUNNING" and record.cpus == 3 and record.borrowing == 1
    assert record.gpu_list() == [2] and record.spec_dict()["config"] == {"lr": 0.1}


def test_records_are_frozen_and_have_no_string_keys(tmp_path: Path) -> None:
    store = Store(tmp_path)
    record = store.row(_queue(store))
    assert record is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = "FAILED"  # type: ignore[misc]
    with pytest.raises(TypeError):
        record["status"]  # type: ignore[index]


def test_every_whole_row_read_returns_records(tmp_path: Path) -> None:
    store = Store(tmp_path)
    job_id = _queue(store, idempotency_key="k1")
    with store.tx() as c:
        in_tx = store.row_in(c, job_id)
    found = [
        store.row(job_id),
        in_tx,
        store.by_idempotency_key("k1"),
        *store.rows("WHERE job_id=?", (job_id,)),
        *store.live_rows(),
        *store.page_rows(),
    ]
    assert len(found) == 6 and all(isinstance(r, JobRecord) for r in found)
    assert {r.job_id for r in found if r is not None} == {job_id}
    assert store.running_rows() == [] and store.row("job-0000000000") is None


def test_a_migrated_home_with_columns_out_of_order(tmp_path: Path) -> None:
    """An older home gains missing columns at the end of its table (ALTER TABLE ADD COLUMN):
    records are still read by name, not by the table's column positions."""
    Store(tmp_path).conn.close()
    db = sqlite3.connect(tmp_path / "air.db")
    db.execute("ALTER TABLE jobs DROP COLUMN cpus")  # a column in the middle of the table
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    store = Store(tmp_path)
    names = [r["name"] for r in store.conn.execute("PRAGMA table_info(jobs)")]
    assert names[-1] == "cpus" and tuple(names) != JOB_FIELDS  # re-added last
    job_id = _queue(store)
    with store.tx() as c:
        assert store.mark_running(c, job_id, [], 5, False)
    record = store.row(job_id)
    assert record is not None
    assert record.cpus == 5 and record.priority == 1 and record.project == "default"
    assert record.job_class is not None and record.status == "RUNNING"
