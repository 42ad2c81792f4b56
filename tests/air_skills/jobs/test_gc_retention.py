"""`air gc`'s retention policy for finished jobs (issue 41.6): by count and by age, a study's
kept trials, best and baseline stay, a job a live job references stays, a dry run removes
nothing, and a job folder replaced by a link never takes the link's target with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import GATED, open_gate

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.runs import retention
from air_skills.runtime.store.results_index import STUDY_TAG
from autoresearch.journal.journal import Journal

PY = sys.executable
AIR = str(Path(PY).parent / "air")
SCRIPT = "print('---'); print('loss: 0.5')"  # a summary block: one metric, one results row


def air_gc(home: Path, *extra: str) -> dict:
    done = subprocess.run(
        [AIR, "gc", "--json", *extra], capture_output=True, text=True, timeout=300,
        env={**os.environ, "AIR_HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_jobs(client: Client, n: int, tags: dict[str, str] | None = None) -> list[str]:
    """``n`` small tracked jobs, one after the other (so each ends after the one before)."""
    ids = []
    for i in range(n):
        spec = JobSpec(command=[PY, "-c", SCRIPT], code="live", tags=tags or {}, name=f"j{i}")
        job = client.launch(spec)
        (info,) = client.wait([job.job_id], timeout_s=180)
        assert info.status == JobStatus.SUCCEEDED, info.message
        ids.append(job.job_id)
    return ids


def present(client: Client, job_id: str) -> bool:
    """The job's folder, its row and its results rows all there."""
    rows = client.store.read("SELECT 1 FROM jobs WHERE job_id=?", (job_id,))
    results = client.store.read("SELECT 1 FROM results WHERE job_id=?", (job_id,))
    return (client.home / "jobs" / job_id).is_dir() and bool(rows) and bool(results)


def gone(client: Client, job_id: str, run_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    rows = client.store.read("SELECT 1 FROM jobs WHERE job_id=?", (job_id,))
    results = client.store.read("SELECT 1 FROM results WHERE job_id=?", (job_id,))
    try:
        client.tracker.client.get_run(run_id)
        run_gone = False
    except MlflowException:
        run_gone = True  # purged from the sqlite store
    return not (client.home / "jobs" / job_id).exists() and not rows and not results and run_gone


def write_study(home: Path, name: str, baseline: str, kept: str, discarded: str) -> None:
    """A study's journal as the loop writes it: a baseline, a kept trial, a discarded one."""
    folder = home / "studies" / name
    folder.mkdir(parents=True)
    journal = Journal(folder)
    journal.append("session_started", study={"name": name})
    for n, (source, job, decision) in enumerate(
        [("baseline", baseline, "baseline"), ("tpe", kept, "keep"), ("tpe", discarded, "discard")]
    ):
        journal.append("proposal", trial=n, source=source, config={"lr": n}, diff={})
        journal.append("launched", trial=n, job_id=job, run_id=None, attempt=1)
        journal.append("finished", trial=n, status="SUCCEEDED", value=0.5)
        journal.append("decision", trial=n, decision=decision)


@pytest.fixture
def home_with_jobs(client: Client) -> tuple[Client, dict[str, str]]:
    """A study of three trials (baseline, kept, discarded), then three plain jobs."""
    study = run_jobs(client, 3, tags={STUDY_TAG: "s1"})
    write_study(client.home, "s1", *study)
    plain = run_jobs(client, 3)
    named = dict(zip(["baseline", "kept", "discarded", "old", "mid", "new"], study + plain))
    return client, named


def test_keep_last_keeps_study_best_baseline_and_what_a_live_job_references(
    home_with_jobs: tuple[Client, dict[str, str]],
) -> None:
    client, job = home_with_jobs
    runs = {k: client.store.row(v).run_id for k, v in job.items()}
    # A live job that names an old one (a checkpoint to start from): that one stays.
    live = client.launch(
        JobSpec(
            command=[PY, "-c", GATED], code="live", track=False,
            config={"resume_from": str(client.home / "jobs" / job["mid"] / "ckpt")},
        )
    )  # fmt: skip
    try:
        dry = air_gc(client.home, "--dry-run", "--keep-last", "1")
        assert dry["jobs"]["dry_run"] is True
        assert set(dry["jobs"]["job_ids"]) == {job["discarded"], job["old"]}
        assert dry["jobs"]["bytes_freed"] > 0 and dry["jobs"]["runs_deleted"] == 2
        assert dry["jobs"]["kept"]["study"] == 2 and dry["jobs"]["kept"]["referenced"] == 1
        assert all(present(client, j) for j in job.values())  # a dry run removes nothing

        done = air_gc(client.home, "--keep-last", "1")
        assert set(done["jobs"]["job_ids"]) == {job["discarded"], job["old"]}
        assert done["jobs"]["runs_deleted"] == 2 and not done["jobs"]["errors"]
        assert done["jobs"]["bytes_freed"] == dry["jobs"]["bytes_freed"]
        for name in ("discarded", "old"):
            assert gone(client, job[name], runs[name]), name
        for name in ("baseline", "kept", "mid", "new"):
            assert present(client, job[name]), name
            assert client.tracker.client.get_run(runs[name]).info.lifecycle_stage == "active"
        assert client.get(live.job_id).status in (JobStatus.QUEUED, JobStatus.RUNNING)
    finally:
        open_gate(client.home / "jobs" / live.job_id)
        client.wait([live.job_id], timeout_s=180)


def test_by_age_removes_only_what_ended_before_the_cutoff(
    home_with_jobs: tuple[Client, dict[str, str]],
) -> None:
    client, job = home_with_jobs
    now = time.time()
    young = retention.collect(client.home, older_than_days=1, now=now + 0.5 * 86400)
    assert young["jobs_removed"] == 0 and young["kept"]["recent"] == 6
    old = retention.collect(client.home, older_than_days=1, now=now + 2 * 86400)
    assert set(old["job_ids"]) == {job["discarded"], job["old"], job["mid"], job["new"]}
    assert old["kept"]["study"] == 2
    assert present(client, job["baseline"]) and present(client, job["kept"])
    # Both rules: a job stays when either keeps it.
    assert retention.collect(client.home, 1, 5, now=now + 2 * 86400)["jobs_removed"] == 0


def test_a_study_whose_journal_is_gone_keeps_all_its_jobs(client: Client) -> None:
    ids = run_jobs(client, 2, tags={STUDY_TAG: "lost"})
    report = air_gc(client.home, "--keep-last", "0")["jobs"]
    assert report["jobs_removed"] == 0 and report["kept"]["study"] == 2
    assert all(present(client, j) for j in ids)


def test_a_job_folder_replaced_by_a_link_never_removes_the_links_target(
    client: Client, tmp_path: Path
) -> None:
    (job_id,) = run_jobs(client, 1)
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "precious").write_text("keep me")
    (victim / "sub" / "also").write_text("keep me too")
    folder = client.home / "jobs" / job_id
    moved = tmp_path / "moved"
    folder.rename(moved)  # what the job's folder held, aside (its own links included)
    folder.symlink_to(victim)

    dry = air_gc(client.home, "--dry-run", "--older-than", "0")["jobs"]
    assert dry["job_ids"] == [job_id] and dry["bytes_freed"] == 0  # nothing followed to count
    report = air_gc(client.home, "--older-than", "0")["jobs"]
    assert report["job_ids"] == [job_id]
    assert not os.path.lexists(folder)
    assert (victim / "precious").read_text() == "keep me"
    assert (victim / "sub" / "also").read_text() == "keep me too"
    assert not client.store.read("SELECT 1 FROM jobs WHERE job_id=?", (job_id,))


def test_a_link_inside_a_job_folder_is_removed_not_followed(client: Client, tmp_path: Path) -> None:
    (job_id,) = run_jobs(client, 1)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    (client.home / "jobs" / job_id / "ckpt").symlink_to(victim)
    report = air_gc(client.home, "--keep-last", "0")["jobs"]
    assert report["job_ids"] == [job_id]
    assert not (client.home / "jobs" / job_id).exists()
    assert (victim / "precious").read_text() == "keep me"


def test_runs_are_purged_in_bulk_rows_and_artifacts_too(client: Client) -> None:
    """Every removed job's run goes from MLflow's sqlite store with its metrics, params, tags
    and artifacts (under AIR_HOME), in one transaction per 500 runs; a run already purged
    out of band is not counted and its job goes all the same."""
    import sqlite3

    ids = run_jobs(client, 4)
    runs = [str(client.store.row(j).run_id) for j in ids]
    mlflow = client.tracker.client
    for run_id in runs:
        mlflow.log_param(run_id, "p", "1")
        mlflow.log_text(run_id, "kept with the run", "notes.txt")
    folders = [Path(mlflow.get_run(r).info.artifact_uri.removeprefix("file://")) for r in runs]
    assert all((f / "notes.txt").is_file() for f in folders)
    home = client.home.resolve()
    assert all(f.resolve().is_relative_to(home) for f in folders)
    mlflow._tracking_client.store._hard_delete_run(runs[0])  # gone before the gc

    report = air_gc(client.home, "--keep-last", "0")["jobs"]
    assert sorted(report["job_ids"]) == sorted(ids) and not report["errors"]
    assert report["runs_deleted"] == 3  # the one purged out of band is not counted
    assert all(gone(client, j, r) for j, r in zip(ids, runs, strict=True))
    assert not any(f.exists() for f in folders[1:])  # the out-of-band purge left its own
    db = sqlite3.connect(client.home / "mlflow.db")
    try:
        marks = ",".join("?" * len(runs))
        for table in ("runs", "metrics", "latest_metrics", "params", "tags"):
            left = db.execute(f"SELECT COUNT(*) FROM {table} WHERE run_uuid IN ({marks})", runs)
            assert left.fetchone()[0] == 0, table
    finally:
        db.close()


def test_no_rule_removes_nothing(client: Client) -> None:
    ids = run_jobs(client, 1)
    report = air_gc(client.home)["jobs"]
    assert report["jobs_removed"] == 0 and report["older_than_days"] is None
    assert present(client, ids[0])


def ev(event: str, trial: int, **fields: object) -> dict:
    return {"event": event, "trial": trial, **fields}


def trial(n: int, source: str, job: str, decision: str | None = None, **proposal: object):
    out = [ev("proposal", n, source=source, **proposal), ev("launched", n, job_id=job)]
    return out + ([ev("decision", n, decision=decision)] if decision else [])


@pytest.mark.parametrize(
    ("events", "kept"),
    [
        # the baseline, its noise repeat and the kept trial stay; the discarded one goes
        (trial(0, "baseline", "b", "baseline") + trial(1, "noise", "n", "noise")
         + trial(2, "tpe", "k", "keep") + trial(3, "tpe", "d", "discard"), {"b", "n", "k"}),
        # a kept code trial keeps the trials its code descends from (what an export builds on)
        (trial(0, "llm", "p0", "discard") + trial(1, "llm", "p1", "discard", parent=0)
         + trial(2, "llm", "k", "keep", parent=1) + trial(3, "llm", "x", "discard"),
         {"p0", "p1", "k"}),
        # the confirm runs of a kept trial, and the final re-evaluation's winner and runs
        (trial(0, "tpe", "k", "keep") + trial(1, "confirm", "c", confirms=0)
         + trial(2, "tpe", "w") + trial(3, "final", "f", final_of=2)
         + [{"event": "final_done", "winner": 2}], {"k", "c", "w", "f"}),
        # a retried trial: every attempt's job
        (trial(0, "tpe", "a1", "keep") + [ev("launched", 0, job_id="a2")], {"a1", "a2"}),
        # a trial decided keep, then beaten: it was a kept trial, it stays
        (trial(0, "tpe", "k1", "keep") + trial(1, "tpe", "k2", "keep"), {"k1", "k2"}),
        # bad lines are skipped, not fatal
        ([{"event": "launched", "trial": "x", "job_id": "j"}] + trial(0, "tpe", "k", "keep"),
         {"k"}),
    ],
)  # fmt: skip
def test_what_a_study_journal_keeps(events: list[dict], kept: set[str]) -> None:
    assert retention.kept_jobs(events) == kept
