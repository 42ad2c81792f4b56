"""`autoresearch host`: many studies in one real process, each with its own journal and budget.

The host runs as its own process (`autoresearch host run`) on a real home: real trials (tiny
`python -S -c` jobs on simulated GPUs), real SQLite, real journals. The big test hosts 100
studies, kills the host with SIGKILL mid-run and starts it again: every study ends once, with
exactly its own budget of trials, and no trial is launched twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import wait_until

from autoresearch.journal.journal import Journal, replay

LOSS = (
    "import json,os; c=json.load(open(os.environ['AIR_CONFIG_FILE']));"
    " print('---'); print('loss:', (c['x']-0.3)**2)"
)
SLEEP = "import time; time.sleep(300)"
NO_METRIC = "print('---'); print('acc: 1.0')"
AUTORESEARCH = [sys.executable, "-m", "autoresearch.cli"]


def spec(name: str, trials: int, code: str = LOSS, workdir: Path | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "command": [sys.executable, "-S", "-c", code],
        "workdir": str(workdir),
        "base_config": {"x": 0.0},
        "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": trials, "concurrency": 1},
        "gpus_per_trial": 1,
        "proposer": "random",
        "sandbox": "off",
        "early_stopping": {"type": "none"},
    }


def add(tmp: Path, host: Path, *studies: dict[str, Any]) -> list[Path]:
    """`autoresearch host add` of the studies, in one call; their study folders."""
    paths = []
    for study in studies:
        paths.append(tmp / f"{study['name']}.yaml")
        paths[-1].write_text(yaml.safe_dump(study))
    cmd = [*AUTORESEARCH, "host", "add", *map(str, paths), "--host-dir", str(host), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return [Path(a["study_dir"]) for a in json.loads(done.stdout)["added"]]


def start_host(host: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*AUTORESEARCH, "host", "run", "--host-dir", str(host)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def events(folder: Path, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in Journal(folder).read() if kind is None or e["event"] == kind]


def stopped(folder: Path) -> bool:
    state = replay(events(folder))
    return state.stopped is not None


def host_ls(host: Path) -> dict[str, Any]:
    cmd = [*AUTORESEARCH, "host", "ls", "--host-dir", str(host), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def all_ended(host: Path) -> dict[str, Any] | None:
    """`host ls` once no study of the host is running any more; None before."""
    view = host_ls(host)
    return view if all(s["state"] != "running" for s in view["studies"]) else None


@pytest.fixture
def host_home(study_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "8")
    monkeypatch.setenv("AIR_SANDBOX", "off")
    return study_home


@pytest.mark.slow
@pytest.mark.timeout(600)  # a bound, not a measure: ~170 s on 2 busy cores (load 7-15)
def test_a_hundred_studies_in_one_host_keep_their_budgets_and_resume_after_a_kill(
    host_home: Path, tmp_path: Path
) -> None:
    from air_skills import Client

    host, workdir, log = tmp_path / "host", tmp_path / "wd", tmp_path / "host.out"
    workdir.mkdir()
    budgets = {f"s{i:03d}": 1 + (i % 4 == 0) for i in range(100)}  # 1 or 2 trials: 125 in all
    added = add(tmp_path, host, *(spec(n, b, workdir=workdir) for n, b in budgets.items()))
    folders = dict(zip(budgets, added, strict=True))
    assert len(set(folders.values())) == 100

    proc = start_host(host, log)
    try:
        # mid-run: some studies done, most not (a journal's stop is written last)
        wait_until(lambda: sum(stopped(f) for f in folders.values()) >= 10, timeout_s=240,
                   every_s=0.5)  # fmt: skip
        os.killpg(proc.pid, signal.SIGKILL)  # the host (its trials run in sessions of their own)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    first_pid = proc.pid
    done_before = {n for n, f in folders.items() if stopped(f)}
    assert 10 <= len(done_before) < 100, "the kill came mid-run"

    proc = start_host(host, log)
    try:
        wait_until(lambda: all(stopped(f) for f in folders.values()), timeout_s=300, every_s=0.5)
        # a loop's last line comes before its report and the release of its folder
        view = wait_until(lambda: all_ended(host), timeout_s=120, every_s=1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]

    job_ids: list[str] = []
    for name, folder in folders.items():
        evs = events(folder)
        launched = [e for e in evs if e["event"] == "launched"]
        # exactly its own budget, each trial launched once (no relaunch after the kill)
        assert len(launched) == budgets[name], (name, launched)
        assert len({e["trial"] for e in launched}) == budgets[name]
        assert len([e for e in evs if e["event"] == "stopped"]) == 1, name
        state = replay(evs)
        assert state.stopped and state.stopped["reason"] == "budget:trials", (name, state.stopped)
        assert all(t.status.value == "SUCCEEDED" for t in state.trials.values()), name
        sessions = [e["pid"] for e in evs if e["event"] == "session_started"]
        # hosted by the first host process, then (if not done before the kill) the second
        if name in done_before:
            assert sessions == [first_pid], name
        else:
            assert sessions in ([first_pid, proc.pid], [proc.pid]), (name, sessions)
        job_ids += [e["job_id"] for e in launched]
    assert len(set(job_ids)) == len(job_ids) == sum(budgets.values())  # separate, none shared
    # the store ran exactly those jobs: nothing launched twice behind a journal's back
    rows = Client().store.read("SELECT job_id, status FROM jobs")
    assert sorted(r[0] for r in rows) == sorted(job_ids)
    assert {r[1] for r in rows} == {"SUCCEEDED"}
    assert {s["state"] for s in view["studies"]} == {"finished"}
    assert [s["trials_used"] for s in view["studies"]] == list(budgets.values())


@pytest.mark.slow
def test_one_study_fails_or_is_stopped_and_the_others_go_on(
    host_home: Path, tmp_path: Path
) -> None:
    from air_skills import Client

    host, workdir, log = tmp_path / "host", tmp_path / "wd", tmp_path / "host.out"
    workdir.mkdir()
    good, bad, slow, doomed = add(
        tmp_path,
        host,
        spec("good", 2, workdir=workdir),
        spec("no-metric", 2, NO_METRIC, workdir=workdir),
        spec("slow", 2, SLEEP, workdir=workdir),
        spec("doomed", 2, SLEEP, workdir=workdir),
    )
    proc = start_host(host, log)
    try:
        wait_until(lambda: events(slow, "job_started"), timeout_s=180, every_s=0.2)
        # a steer reaches a hosted loop at once (the waiter wakes it; its own wait is 30 s)
        cmd = [*AUTORESEARCH, "steer", str(slow), "--note", "from the test"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert [e["note"] for e in events(slow, "steer")] == ["from the test"]
        cmd = [*AUTORESEARCH, "host", "stop", "slow", "--host-dir", str(host), "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["stop_reason"] == "stop-request"
        # a crash that is no AirError: its folder vanishes, and its next journal line fails
        job = wait_until(lambda: events(doomed, "job_started"), timeout_s=180, every_s=0.2)
        job_id = events(doomed, "launched")[0]["job_id"]
        assert job
        shutil.rmtree(doomed)
        Client().cancel(job_id, reason="the test", wait_s=0)  # wakes its loop
        wait_until(lambda: "[doomed] failed" in (host / "host.log").read_text(), timeout_s=120)
        wait_until(lambda: stopped(good) and stopped(bad), timeout_s=180, every_s=0.2)
        assert proc.poll() is None  # the host outlives a failed, a crashed and a stopped study
        ended = wait_until(lambda: all_ended(host), timeout_s=120, every_s=1)
        view = {s["name"]: s for s in ended["studies"]}
        # a study dropped into specs/ by hand while the host runs is started too
        late = tmp_path / "late.yaml"
        late.write_text(yaml.safe_dump(spec("late", 1, workdir=workdir)))
        (host / "specs" / "late.yaml").write_text(late.read_text())
        late_dir = host_home / "studies" / "late"
        wait_until(lambda: Journal(late_dir).exists() and stopped(late_dir), timeout_s=180,
                   every_s=0.2)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    assert view["good"]["state"] == "finished" and view["good"]["trials_used"] == 2
    assert view["no-metric"]["state"] == "failed"
    assert replay(events(bad)).last_error["code"] == "unknown-metric"  # type: ignore[index]
    assert view["slow"]["state"] == "finished" and replay(events(slow)).stopped["reason"] == (
        "stop-request"
    )
    assert [e["status"] for e in events(slow, "finished")] == ["CANCELLED"]
    assert stopped(good) and len(events(good, "launched")) == 2
    assert view["doomed"]["state"] == "failed"
    assert "FileNotFoundError" in view["doomed"]["error"], view["doomed"]

    # the failed one, fixed and added again, replaces its failed spec; started again, the host
    # runs it and leaves the studies that ended as they are
    (again,) = add(tmp_path, host, spec("doomed", 1, workdir=workdir))
    assert not list((host / "specs").glob("*.failed.json"))
    proc = start_host(host, log)
    try:
        wait_until(lambda: Journal(again).exists() and stopped(again), timeout_s=180,
                   every_s=0.2)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert replay(events(again)).stopped["reason"] == "budget:trials"  # type: ignore[index]
    assert len(events(good, "session_started")) == 1
    assert len(events(slow, "session_started")) == 1
