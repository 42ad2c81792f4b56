"""Project quotas with real processes: borrowing idle GPUs, reclaim, the quota commands."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import InvalidInput, NotFound
from air_skills.quotas import list_quotas, remove_quota, set_quota

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
LONG = ["sleep", "300"]  # the job's own work; the test ends it by cancelling


def launch(client: Client, project: str) -> str:
    spec = JobSpec(command=LONG, gpus=1, project=project, track=False)
    return client.launch(spec).job_id


def statuses(client: Client, ids: list[str]) -> list[str]:
    return [client.get(j).status.value for j in ids]


def preempt_events(client: Client, job_id: str) -> list[str]:
    return [e["kind"] for e in client.events(job_id) if "preempt" in e["kind"]]


def test_borrowed_gpus_go_back_when_the_owner_submits(client: Client) -> None:
    set_quota(client.store, "A", 2)
    set_quota(client.store, "B", 2)

    # A alone: two jobs within its quota, two borrowing the idle GPUs of B's quota.
    a = [launch(client, "A") for _ in range(4)]
    wait_until(lambda: statuses(client, a) == ["RUNNING"] * 4)
    assert [client.get(j).borrowing for j in a] == [False, False, True, True]
    assert {tuple(client.get(j).gpus) for j in a} == {(0,), (1,), (2,), (3,)}
    gpus = client.gpus()
    assert sorted(g.borrowing for g in gpus) == [False, False, True, True]
    assert {g.project for g in gpus} == {"A"}
    assert "(A, borrowing)" in client.holders()[a[3]]

    # B submits: A's borrowers are preempted (requeued, same ids) and B gets its 2 at once,
    # while A's jobs within quota keep running.
    b = [launch(client, "B") for _ in range(2)]
    wait_until(lambda: statuses(client, b) == ["RUNNING", "RUNNING"])
    assert statuses(client, a) == ["RUNNING", "RUNNING", "QUEUED", "QUEUED"]
    for j in a[2:]:
        info = client.get(j)
        assert info.job_id == j and info.attempts == 1
        assert "borrowing" in info.message  # why it waits: A is at its quota
        requeued = [e["message"] for e in client.events(j) if e["kind"] == "requeued-preempted"]
        assert "project B reclaimed its GPU quota" in requeued[0]
    for j in a[:2]:
        assert client.get(j).attempts == 1 and preempt_events(client, j) == []
    assert not any(client.get(j).borrowing for j in b)

    client.reconcile()
    rows = {r["project"]: r for r in list_quotas(client.store)}
    assert rows["A"] == {
        "project": "A", "quota": 2, "in_use": 2, "borrowing": 0, "queued": 2, "queued_gpus": 2,
    }  # fmt: skip
    assert rows["B"]["in_use"] == 2 and rows["B"]["borrowing"] == 0
    assert {i.job_id for i in client.list(project="A").items} == set(a)

    # B leaves: A's requeued jobs borrow again, same ids, second attempt.
    for j in b:
        client.cancel(j)
    wait_until(lambda: statuses(client, a) == ["RUNNING"] * 4)
    assert [client.get(j).attempts for j in a] == [1, 1, 2, 2]
    assert [client.get(j).borrowing for j in a] == [False, False, True, True]
    assert preempt_events(client, a[0]) == [] and preempt_events(client, a[1]) == []
    client.cancel_all()


def test_borrower_becomes_regular_when_its_project_has_room(client: Client) -> None:
    set_quota(client.store, "A", 1)
    a = [launch(client, "A") for _ in range(2)]
    wait_until(lambda: statuses(client, a) == ["RUNNING", "RUNNING"])
    assert [client.get(j).borrowing for j in a] == [False, True]
    client.cancel(a[0])  # its supervisor's pass relabels the borrower
    wait_until(lambda: not client.get(a[1]).borrowing)
    client.cancel_all()


def test_a_new_quota_reclaims_at_once(client: Client) -> None:
    """Setting a quota runs a pass: jobs of a newly guaranteed project start."""
    a = [launch(client, "A") for _ in range(4)]
    wait_until(lambda: statuses(client, a) == ["RUNNING"] * 4)
    set_quota(client.store, "A", 2)  # now A's two youngest borrow the shared rest... of 2
    b = launch(client, "B")  # no quota: shares the 2 GPUs the quota leaves
    wait_until(lambda: client.get(b).status == JobStatus.RUNNING)
    assert sum(s == "QUEUED" for s in statuses(client, a)) == 1
    client.cancel_all()


def test_quota_bad_input(client: Client) -> None:
    with pytest.raises(InvalidInput) as exc:
        set_quota(client.store, "no spaces", -1)
    assert len(exc.value.context["problems"]) == 2  # both problems at once
    result = set_quota(client.store, "A", 9)
    assert result["quota"] == 9 and "more than the 4 in the pool" in result["warning"]
    result = set_quota(client.store, "a", 1)
    assert "did you mean 'A'" in result["warning"]
    with pytest.raises(NotFound) as exc:
        remove_quota(client.store, "nope")
    assert "known projects: A, a, default" in exc.value.message
    assert remove_quota(client.store, "a")["previous"] == 1
    with pytest.raises(NotFound) as exc:
        client.list(project="AA")
    assert "did you mean 'A'" in exc.value.hint
    with pytest.raises(NotFound, match="has no quota"):
        remove_quota(client.store, "default")


def air(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AIR, *args], capture_output=True, text=True, timeout=60)


def test_quota_cli(air_home: Path) -> None:
    done = air("quota", "set", "A", "--gpus", "6", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["quota"] == 6 and "more than the 4 in the pool" in out["warning"]
    human = air("quota", "set", "B", "--gpus", "2")
    assert human.returncode == 0 and "warning" in human.stderr
    listed = json.loads(air("quota", "ls", "--json").stdout)
    assert [(r["project"], r["quota"], r["in_use"]) for r in listed] == [("A", 6, 0), ("B", 2, 0)]
    bad = air("quota", "rm", "C", "--json")
    assert bad.returncode == 2
    assert "known projects: A, B, default" in json.loads(bad.stdout)["error"]["message"]
    assert air("ls", "--project", "nope").returncode == 2


def test_project_defaults_to_air_project(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    assert client.launch(JobSpec(command=["true"], track=False)).project == "default"
    monkeypatch.setenv("AIR_PROJECT", "vision")
    info = client.launch(JobSpec(command=["true"], track=False))
    assert info.project == "vision"
    assert client.launch(JobSpec(command=["true"], project="nlp", track=False)).project == "nlp"
    client.wait([info.job_id], timeout_s=60)
