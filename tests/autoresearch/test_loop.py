"""Real studies: real processes on simulated GPUs, a real SQLite store and MLflow store.

The trial script records its own start and end times, so concurrency is checked from the
outside; waits poll the journal with deadlines, never sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ar_helpers import small_study
from helpers import wait_until
from typer.testing import CliRunner

from air_skills.errors import UnknownMetric
from autoresearch.cli import app
from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.loop.loop import StudyLoop, run_study
from autoresearch.proposers import Proposal, ProposalRequest, ProposalResult, Proposer
from autoresearch.study.study import parse_study

POLL_S = 0.2


class ScriptedProposer(Proposer):
    """Proposes a fixed list of diffs in order; where it is is read from the history."""

    name = "scripted"

    def __init__(self, diffs: list[dict[str, Any]]) -> None:
        self.diffs = diffs

    def propose(self, request: ProposalRequest) -> ProposalResult:
        used = sum(1 for t in request.trials if t.source == "scripted") + len(request.pending)
        todo = self.diffs[used : used + request.n]
        return ProposalResult([Proposal(d, "scripted", "scripted") for d in todo])


def events(study_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    evs = Journal(study_dir).read()
    return [e for e in evs if kind is None or e["event"] == kind]


def max_overlap(stamps: Path) -> tuple[int, int]:
    """(runs seen, most runs at once) from the scripts' own start/end files."""
    points = []
    for start in stamps.glob("*.start"):
        end = start.with_suffix(".end")
        points.append((json.loads(start.read_text())["t"], 1))
        points.append((json.loads(end.read_text())["t"], -1))
    now = peak = 0
    for _, delta in sorted(points, key=lambda p: (p[0], p[1])):
        now += delta
        peak = max(peak, now)
    return len(points) // 2, peak


def test_concurrency_budget_report_and_mlflow(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the trials stamp into tmp_path, outside their folder
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    study = parse_study(
        small_study(
            name="conc",
            # Each trial holds until it sees another live beside it (await_peer): two overlap
            # however slowly a loaded machine launches them, if the loop runs them at once.
            # Not the baseline (free_x): no trial runs beside it (issue 38.2).
            base_config={
                "x": 0.0,
                "y": 0.0,
                "steps": 4,
                "sleep_s": 0.25,
                "stamp_dir": str(stamps),
                "await_peer": True,
                "free_x": 0.0,
            },
            budget={"trials": 5, "concurrency": 3},
            gpus_per_trial=1,
            proposer="random",
        )
    )
    folder = tmp_path / "study"
    result = run_study(study, folder, poll_s=POLL_S)
    assert result.stop_reason == "budget:trials"
    runs, peak = max_overlap(stamps)
    assert runs == 5
    assert 2 <= peak <= 3
    st = replay(events(folder))
    assert [t.status for t in st.ordered()] == [TrialStatus.SUCCEEDED] * 5
    assert st.trials[0].source == "baseline" and st.trials[0].decision == "baseline"
    assert {t.decision for t in st.ordered()[1:]} <= {"keep", "discard"}
    assert st.best_trial is not None
    best_value = min(t.value for t in st.ordered() if t.decision in ("keep", "baseline"))
    assert st.best_value == pytest.approx(best_value)
    assert (folder / "report.md").exists() and (folder / "objective.png").stat().st_size > 1000
    assert "## Trials" in (folder / "report.md").read_text()
    # the MLflow mirror: one parent run, each trial's job run a child of it
    from mlflow.tracking import MlflowClient

    mc = MlflowClient(f"sqlite:///{study_home / 'mlflow.db'}")
    parent = mc.get_run(st.parent_run_id)
    assert parent.info.status == "FINISHED"
    for t in st.ordered():
        tags = mc.get_run(t.run_id).data.tags
        assert tags["mlflow.parentRunId"] == st.parent_run_id
        assert tags["autoresearch.trial"] == str(t.number)
    # the CLI reads the same folder
    runner = CliRunner()
    res = runner.invoke(app, ["status", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["state"] == "finished" and summary["trials"]["succeeded"] == 5
    assert summary["best"]["trial"] == st.best_trial
    res = runner.invoke(app, ["report", str(folder), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["best"]["trial"] == st.best_trial


def test_wall_time_budget_stops_and_cancels(study_home: Path, tmp_path: Path) -> None:
    study = parse_study(
        small_study(
            name="wall",
            base_config={"x": 0.0, "y": 0.0, "steps": 300, "sleep_s": 0.1},
            budget={"trials": 20, "concurrency": 2, "wall_time_min": 0.15},
        )
    )
    folder = tmp_path / "study"
    result = run_study(study, folder, poll_s=POLL_S)
    assert result.stop_reason == "budget:wall_time_min"
    st = replay(events(folder))
    assert len(st.trials) == 1  # the baseline, which no trial runs beside (issue 38.2)
    assert {t.status for t in st.ordered()} == {TrialStatus.CANCELLED}
    assert all("wall_time" in (t.failure or "") for t in st.ordered())
    from air_skills import Client

    jobs = Client().list(limit=100).items
    assert len(jobs) == 1 and all(j.status.value == "CANCELLED" for j in jobs)


def test_llm_budget_stops_the_loop(study_home: Path, tmp_path: Path, llm_server: Any) -> None:
    pytest.importorskip("anthropic")  # the [llm] extra
    study = parse_study(
        small_study(
            name="llm",
            budget={"trials": 10, "concurrency": 2, "llm_usd": 0.01},
            proposer={"type": "llm", "base_url": llm_server.anthropic_url},
        )
    )
    # the baseline runs alone (issue 38.2); then one round fills both slots
    llm_server.anthropic_tool(
        [
            {"diff": {"x": 0.3, "y": 0.6}, "rationale": "the sweet spot"},
            {"diff": {"x": 0.2, "y": 0.5}, "rationale": "near it"},
        ]
    )
    folder = tmp_path / "study"
    result = run_study(study, folder, poll_s=POLL_S)
    assert result.stop_reason == "budget:llm_usd"
    assert len(llm_server.requests) == 1
    st = replay(events(folder))
    assert len(st.trials) == 3 and st.trials[1].source == st.trials[2].source == "llm"
    assert st.trials[1].rationale == "the sweet spot"
    assert st.llm_usd == pytest.approx((1000 * 3 + 200 * 15) / 1e6)
    assert st.trials[1].decision == "keep"


@pytest.mark.slow
def test_early_stopping_prunes_and_failures_keep_the_log(study_home: Path, tmp_path: Path) -> None:
    data = small_study(
        name="prune",
        base_config={
            "x": 0.0,
            "y": 0.0,
            "steps": 6,
            "sleep_s": 0.4,
            "log": "mlflow",
            "fail": False,
        },
        budget={"trials": 4, "concurrency": 2},
        early_stopping={"type": "median", "min_steps": 1, "min_trials": 2},
    )
    data["search_space"]["fail"] = {"type": "choice", "values": [False, True]}
    # The trial to prune takes its 6 steps ten times slower than the others, so that on a loaded
    # machine the rule has time to act before it ends: what is checked is that it was stopped,
    # not a race. (Its steps stay 6: the rule compares trials at the steps they share.)
    data["search_space"]["sleep_s"] = {"type": "choice", "values": [0.4, 4.0]}
    data["objective"]["step_metric"] = "loss"
    study = parse_study(data)
    proposer = ScriptedProposer(
        [
            {"x": 0.3, "y": 0.6},  # the best
            {"fail": True},  # crashes after its first step
            {"x": -1.0, "y": -1.0, "sleep_s": 4.0},  # far worse all along: pruned
        ]
    )
    folder = tmp_path / "study"
    run_study(study, folder, proposer=proposer, poll_s=POLL_S)
    st = replay(events(folder))
    status = [t.status for t in st.ordered()]
    assert status[:3] == [TrialStatus.SUCCEEDED, TrialStatus.SUCCEEDED, TrialStatus.FAILED]
    assert status[3:] == [TrialStatus.PRUNED]
    from air_skills import Client

    client = Client()
    for t in st.ordered()[3:]:
        assert t.steps is not None and 1 <= t.steps < 6
        assert "worse than the median" in (t.failure or "")
        assert client.get(t.job_id).status.value == "CANCELLED"
        assert t.decision == "pruned"
    failed = st.trials[2]
    assert "boom" in failed.failure and failed.failure_kind == "user"
    assert "RuntimeError" in failed.log_tail
    assert st.best_trial == 1


@pytest.mark.slow
def test_resume_after_kill_9_repeats_no_trial(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the trials look for their hold file in tmp_path
    folder = tmp_path / "study"
    study_file = tmp_path / "study.yaml"
    hold = tmp_path / "hold"  # the proposed trials run until the loop is killed; the baseline
    hold.write_text("")  # (x=0) does not: a fixed-length trial may end first when loaded
    data = small_study(
        name="resume",
        base_config={
            "x": 0.0,
            "y": 0.0,
            "steps": 8,
            "sleep_s": 0.4,
            "hold_while": str(hold),
            "free_x": 0.0,
        },
        budget={"trials": 4, "concurrency": 2},
    )
    study_file.write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "autoresearch.cli", "run", str(study_file), "--dir", str(folder)]
    proc = subprocess.Popen(
        [*cmd, "--poll-s", str(POLL_S)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: len(events(folder, "finished")) >= 1 and len(events(folder, "launched")) >= 3,
            timeout_s=90,
        )
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    before = replay(events(folder))
    running = {t.number: t.job_id for t in before.ordered() if t.job_id and not t.job_done}
    assert running, "some trial should still be running when the loop is killed"
    hold.unlink()

    result = run_study(folder, resume=True, poll_s=POLL_S)
    assert result.stop_reason == "budget:trials"
    evs = events(folder)
    proposed = [e["trial"] for e in evs if e["event"] == "proposal"]
    assert sorted(proposed) == list(range(4))  # every trial proposed exactly once
    launched = [(e["trial"], e["job_id"]) for e in evs if e["event"] == "launched"]
    retried = [e["trial"] for e in evs if e["event"] == "infra_retry"]
    # launched once each; a relaunch only after an infra failure (a loop killed while it was
    # starting a job's supervisor can leave that job without one: the core fails it as infra)
    assert sorted(t for t, _ in launched) == sorted([*range(4), *retried])
    st = replay(evs)
    assert all(t.status == TrialStatus.SUCCEEDED for t in st.ordered())
    for number, job_id in running.items():  # re-attached: the same job finished the trial
        if number not in retried:
            assert st.trials[number].job_id == job_id
    from air_skills import Client

    jobs = {j.job_id for j in Client().list(limit=100).items}
    assert jobs == {job for _, job in launched}  # nothing ran twice
    assert sum(1 for e in evs if e["event"] == "session_started") == 2


def test_a_metric_never_logged_names_the_logged_keys(study_home: Path, tmp_path: Path) -> None:
    study = parse_study(
        small_study(name="metric", objective={"metric": "val_loss"}, budget={"trials": 3})
    )
    folder = tmp_path / "study"
    with pytest.raises(UnknownMetric) as info:
        run_study(study, folder, poll_s=POLL_S)
    err = info.value
    assert "'val_loss'" in err.message
    assert "loss" in err.context["valid_keys"] and "other_metric" in err.context["valid_keys"]
    assert "other_metric" in err.hint
    st = replay(events(folder))
    assert st.stopped and st.stopped["reason"] == "error"
    assert st.last_error["code"] == "unknown-metric"
    assert all(t.status.is_final() for t in st.ordered())


def test_gpu_hours_budget(tmp_path: Path) -> None:
    study = parse_study(small_study(budget={"gpu_hours": 0.01}))
    loop = StudyLoop(study, tmp_path, client=object())
    loop.emit("session_started", study=study.to_dict(), study_id="x", gpus_per_trial=1)
    loop.emit("proposal", trial=0, source="baseline", diff={}, config={})
    loop.emit("launched", trial=0, job_id="job-0000000000", attempt=1, gpus=1)
    loop.emit("finished", trial=0, status="SUCCEEDED", value=1.0, gpu_s=20.0)
    loop._check_stops()
    assert loop.hard_stop is None
    loop.emit("infra_retry", trial=0, gpu_s=20.0)
    loop._check_stops()
    assert loop.hard_stop == "budget:gpu_hours"


def test_start_and_stop_study_in_the_background(study_home: Path, tmp_path: Path) -> None:
    from air_skills import Client
    from autoresearch.api import get_study, start_study, stop_study

    folder = tmp_path / "bg"
    data = small_study(
        name="bg",
        base_config={"x": 0.0, "y": 0.0, "steps": 300, "sleep_s": 0.1},
        budget={"trials": 10, "concurrency": 2},
    )
    started = start_study(data, folder, poll_s=POLL_S)
    assert started["state"] == "running" and started["pid"]
    wait_until(lambda: len(events(folder, "job_started")) >= 1, timeout_s=60)
    assert get_study(folder)["trials"]["running"] == 1  # the baseline runs alone (38.2)
    stopped = stop_study(folder, reason="enough for today")
    assert stopped["state"] == "finished" and stopped["stop_reason"] == "stop-request"
    assert stopped["stop_detail"] == "enough for today"  # the reason reaches get_study
    st = replay(events(folder))
    assert {t.status for t in st.ordered()} == {TrialStatus.CANCELLED}
    assert all(Client().get(t.job_id).status.is_terminal() for t in st.ordered())


def test_cli_bad_study_exits_2_with_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\ncommand: [python, t.py]\nsearch_space: {}\nobjective: {metric: m}\nfoo: 1\n"
    )
    res = CliRunner().invoke(app, ["run", str(bad), "--json"])
    assert res.exit_code == 2
    error = json.loads(res.stdout)["error"]
    assert error["code"] == "invalid-spec"
    problems = error["context"]["problems"]
    assert any("empty" in p for p in problems) and "foo: unknown key" in problems
