"""No experiment twice (issue 29): the run key, the refusal in Store.queue's transaction, its
result, AIR_DEDUP's modes, allow_duplicate, reruns, near-duplicates and batches."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import AirError
from air_skills.runtime.store.identities import Identity

PY = sys.executable
SUMMARY = "print('---'); print('val_loss: 0.25')"
HOLD = "import time; time.sleep(300)"


def agent(client: Client, name: str = "ann") -> Client:
    client.add_identity(name, "default")
    return client.as_identity(Identity(name, "default"))


def spec(tmp_path: Path, code: str = HOLD, **kw: object) -> JobSpec:
    (tmp_path / "train.py").write_text(code)
    return JobSpec(command=[PY, "train.py"], workdir=str(tmp_path), **kw)  # type: ignore[arg-type]


def test_an_identitys_second_launch_of_a_finished_experiment_is_its_result(
    client: Client, tmp_path: Path
) -> None:
    ann, ben = agent(client, "ann"), agent(client, "ben")
    first = ann.launch(spec(tmp_path, SUMMARY, config={"lr": 0.1, "seed": 1}))
    assert client.wait([first.job_id], timeout_s=120)[0].status == JobStatus.SUCCEEDED
    with pytest.raises(AirError) as refused:  # another agent, another name: the same experiment
        ben.launch(spec(tmp_path, SUMMARY, config={"seed": 1, "lr": 0.1}, name="mine"))
    err = refused.value
    assert err.code == "duplicate" and err.context["job_id"] == first.job_id
    assert err.context["result"]["status"] == "SUCCEEDED"
    assert err.context["result"]["metrics"] == {"val_loss": 0.25}
    assert "launched by ann" in err.message and "val_loss=0.25" in err.message
    assert "allow_duplicate" in err.hint
    other_seed = ben.launch(spec(tmp_path, SUMMARY, config={"lr": 0.1, "seed": 2}))
    again = ben.launch(spec(tmp_path, SUMMARY, config={"lr": 0.1, "seed": 1}, allow_duplicate=True))
    assert len({first.job_id, other_seed.job_id, again.job_id}) == 3
    assert [j.job_id for j in client.list(launched_by="ben").items] == [
        again.job_id,
        other_seed.job_id,
    ]


def test_changed_code_or_command_is_another_experiment_and_a_failed_one_may_run_again(
    client: Client, tmp_path: Path
) -> None:
    ann = agent(client)
    failed = ann.launch(spec(tmp_path, "raise SystemExit(3)", config={"lr": 0.1}))
    assert client.wait([failed.job_id], timeout_s=120)[0].status == JobStatus.FAILED
    retry = ann.launch(spec(tmp_path, "raise SystemExit(3)", config={"lr": 0.1}))
    assert retry.job_id != failed.job_id  # a failed run is not the experiment done
    client.wait([retry.job_id], timeout_s=120)
    running = ann.launch(spec(tmp_path, HOLD, config={"lr": 0.1}))  # the file's content changed
    with pytest.raises(AirError, match=r"\[duplicate\]"):  # queued or running counts too
        ann.launch(spec(tmp_path, HOLD, config={"lr": 0.1}))
    longer = spec(tmp_path, HOLD, config={"lr": 0.1})
    longer = longer.model_copy(update={"command": [PY, "train.py", "--steps", "2"]})
    assert ann.launch(longer).job_id != running.job_id


def test_air_dedup_decides_for_the_local_user_and_reruns_are_never_duplicates(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = client.launch(spec(tmp_path, config={"lr": 0.1}))
    two = client.launch(spec(tmp_path, config={"lr": 0.1}))  # default `identities`: not checked
    assert one.job_id != two.job_id
    monkeypatch.setenv("AIR_DEDUP", "always")
    with pytest.raises(AirError, match=r"\[duplicate\]"):
        client.launch(spec(tmp_path, config={"lr": 0.1}))
    assert client.rerun(one.job_id).job_id not in (one.job_id, two.job_id)
    monkeypatch.setenv("AIR_DEDUP", "off")
    assert agent(client).launch(spec(tmp_path, config={"lr": 0.1})).status == JobStatus.QUEUED


def test_racing_agents_queue_one_experiment_once(client: Client, tmp_path: Path) -> None:
    """The check is in Store.queue's transaction: of eight launches at once, one is queued."""
    ann = agent(client)
    same = spec(tmp_path, config={"lr": 0.3, "seed": 0})

    def one(_: int) -> str:
        try:
            return ann.launch(same).job_id
        except AirError as exc:
            assert exc.code == "duplicate", exc
            return "duplicate:" + exc.context["job_id"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    queued = [r for r in results if not r.startswith("duplicate:")]
    assert len(queued) == 1, results
    assert {r.split(":", 1)[1] for r in results if r not in queued} == set(queued)
    assert len(client.list(limit=50).items) == 1


def test_a_near_duplicate_is_launched_with_a_warning_naming_the_closest_job(
    client: Client, tmp_path: Path
) -> None:
    ann = agent(client)
    base = ann.launch(spec(tmp_path, config={"lr": 0.100, "opt": "adam", "seed": 100}))
    far = ann.launch(spec(tmp_path, config={"lr": 0.2, "opt": "adam", "seed": 100}))
    near = ann.launch(spec(tmp_path, config={"lr": 0.102, "opt": "adam", "seed": 101}))
    other = ann.launch(spec(tmp_path, config={"lr": 0.101, "opt": "sgd", "seed": 100}))
    assert f"NEAR-DUPLICATE of {base.job_id}" in near.message, near.message
    assert "NEAR-DUPLICATE" not in far.message and "NEAR-DUPLICATE" not in other.message


def test_a_batch_gives_the_running_job_for_a_duplicate_item(client: Client, tmp_path: Path) -> None:
    """launch_jobs (launch_many) checks by default, for the local user too."""
    (tmp_path / "train.py").write_text(HOLD)
    item = {"command": [PY, "train.py"], "workdir": str(tmp_path)}
    first = client.launch_many([{**item, "config": {"lr": 0.1}}])[0]
    infos = client.launch_many(
        [{**item, "config": {"lr": lr}} for lr in (0.1, 0.2, 0.2, 0.3)],
    )
    ids = [i.job_id for i in infos]
    assert ids[0] == first.job_id and ids[1] == ids[2] and len(set(ids)) == 3
    assert infos[0].message.startswith("DUPLICATE, not queued") and infos[2].message
    assert len(client.list(limit=50).items) == 3  # distinct configs: 0.1, 0.2, 0.3


def test_a_duplicate_leaves_no_folder_or_run_and_a_dry_run_names_it(
    client: Client, tmp_path: Path
) -> None:
    ann = agent(client)
    first = ann.launch(spec(tmp_path, config={"lr": 0.5}))
    folders = sorted(p.name for p in (client.home / "jobs").iterdir())
    dry = ann.launch(spec(tmp_path, config={"lr": 0.5}), dry_run=True)
    assert f"WOULD BE A DUPLICATE of {first.job_id}" in dry.message, dry.message
    assert "DUPLICATE" not in ann.launch(spec(tmp_path, config={"lr": 0.6}), dry_run=True).message
    with pytest.raises(AirError, match=r"\[duplicate\]"):
        ann.launch(spec(tmp_path, config={"lr": 0.5}))
    assert sorted(p.name for p in (client.home / "jobs").iterdir()) == folders
    runs = client.tracker.client.search_runs([first.experiment_id], run_view_type=3)
    assert [r.info.run_id for r in runs] == [first.run_id]  # none left, deleted or not


def test_the_jobs_of_an_older_home_are_checked_too(client: Client, tmp_path: Path) -> None:
    """A home from before run keys: its jobs get theirs when it is opened (schema migration)."""
    import sqlite3

    old = client.launch(spec(tmp_path, SUMMARY, config={"lr": 0.1}))
    client.wait([old.job_id], timeout_s=120)
    db = sqlite3.connect(client.home / "air.db")
    with db:
        db.execute("UPDATE jobs SET run_key=NULL, near_key=NULL")
        db.execute("PRAGMA user_version = 8")
    db.close()
    reopened = Client(client.home)
    with pytest.raises(AirError) as refused:
        agent(reopened).launch(spec(tmp_path, SUMMARY, config={"lr": 0.1}))
    assert refused.value.context["job_id"] == old.job_id


def test_a_batch_names_the_same_near_duplicates_as_launches_one_by_one(
    client: Client, tmp_path: Path
) -> None:
    """launch_many reads the jobs before it once per kind (duplicates.one_call) and adds its
    own launches as it goes: each item's note names the job a launch of its own would name, a
    job from before the call or an earlier item, never a later one."""
    (tmp_path / "train.py").write_text(HOLD)
    item = {"command": [PY, "train.py"], "workdir": str(tmp_path), "gpus": 0}
    lrs = [0.3, 0.101, 0.5, 0.302, 0.1015, 0.9]
    named: dict[str, list[str | None]] = {}
    for opt in ("adam", "sgd"):
        base = client.launch({**item, "config": {"lr": 0.1, "opt": opt}})
        items = [{**item, "config": {"lr": lr, "opt": opt}} for lr in lrs]
        if opt == "adam":
            infos = client.launch_many(items)
        else:
            infos = [client.launch(i) for i in items]
        label = {base.job_id: "base", **{info.job_id: f"item{n}" for n, info in enumerate(infos)}}
        named[opt] = [
            next((label[w] for w in label if f"NEAR-DUPLICATE of {w}" in i.message), None)
            for i in infos
        ]
    assert named["adam"] == [None, "base", None, "item0", "item1", None], named
    assert named["adam"] == named["sgd"]
