"""Hand-run jobs in a study and diverged trials (issue 24): a prior job that differs from the
base only in its seed is a noise repeat, not run again; an ended prior job is finished at once;
a non-finite or overflowed objective is a failed trial (non-finite), never a value or best."""

from __future__ import annotations

import sys
from pathlib import Path

from ar_helpers import TRIAL_SCRIPT, small_study

from air_skills import Client
from autoresearch.api import get_study, start_study
from autoresearch.journal.journal import Journal

DIVERGE = """\
import json, os
from mlflow.tracking import MlflowClient
kind = json.load(open(os.environ["AIR_CONFIG_FILE"]))["kind"]
value = {"ok": 0.5, "big": 1.7976931348623157e308, "inf": float("inf"), "nan": float("nan")}
MlflowClient().log_metric(os.environ["MLFLOW_RUN_ID"], "loss", value[kind])
"""


def test_prior_jobs_alike_but_for_the_seed_are_noise_repeats_and_show_their_values(
    study_home: Path, tmp_path: Path
) -> None:
    client = Client()
    base = {"x": 0.0, "y": 0.0, "steps": 2, "sleep_s": 0.0, "seed": 0, "noise": 0.01}
    configs = [base, {**base, "seed": 1}, {**base, "seed": 2}, {**base, "x": 0.3}]
    ids = [
        client.launch(
            {"command": [sys.executable, str(TRIAL_SCRIPT)], "config": c, "name": f"hand-{n}"}
        ).job_id
        for n, c in enumerate(configs)
    ]
    assert all(i.status.value == "SUCCEEDED" for i in client.wait(ids, 120, any=False))
    # prior jobs do not spend budget.trials (issue 39.7): one trial of the study's own runs
    study = small_study(name="prior", base_config=base, budget={"trials": 1, "concurrency": 2})
    study["noise"] = {"repeats": 2}
    folder = tmp_path / "prior"
    start_study(study, str(folder), background=False, prior_jobs=ids)
    events = Journal(folder).read()
    first_session = next(n for n, e in enumerate(events) if e["event"] == "session_started")
    finished_before = [e["trial"] for e in events[:first_session] if e["event"] == "finished"]
    assert sorted(finished_before) == [0, 1, 2, 3]  # ended prior jobs: finished at once
    trials = {t["trial"]: t for t in get_study(folder)["recent"]}
    sources = {e["trial"]: e["source"] for e in events if e["event"] == "proposal"}
    assert {n: sources[n] for n in range(4)} == {0: "baseline", 1: "noise", 2: "noise", 3: "prior"}
    assert len(sources) == 5 and sources[4] not in ("baseline", "noise", "prior")
    assert len(client.list(limit=100).items) == 5  # the prior jobs not run again; one search
    assert get_study(folder)["budget"]["trials"] == {"used": 1, "limit": 1}
    assert all(trials[n]["value"] is not None for n in range(4)), trials
    assert all(trials[n]["status"] == "SUCCEEDED" for n in trials), trials


def test_a_non_finite_or_overflowed_objective_is_a_failed_trial_never_best(
    study_home: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(DIVERGE)
    study = small_study(
        name="diverge",
        workdir=str(work),
        command=["python", "train.py"],
        base_config={"kind": "ok"},
        search_space={"kind": {"type": "choice", "values": ["ok", "big", "inf", "nan"]}},
        budget={"trials": 6, "concurrency": 3},
    )
    study["noise"] = {"repeats": 0}
    folder = tmp_path / "diverge"
    start_study(study, str(folder), background=False)
    events = Journal(folder).read()
    finished = {e["trial"]: e for e in events if e["event"] == "finished"}
    kinds = {e["trial"]: e["config"]["kind"] for e in events if e["event"] == "proposal"}
    bad = [n for n, k in kinds.items() if k != "ok"]
    assert bad, kinds
    for n in bad:
        assert finished[n]["status"] == "FAILED" and finished[n]["failure_kind"] == "non-finite"
        assert "value" not in finished[n] or finished[n]["value"] is None
    summary = get_study(folder)
    assert summary["best"]["trial"] == 0 and summary["best"]["value"] == 0.5
    assert not [
        d
        for d in events
        if d["event"] == "decision"
        and d["trial"] in bad
        and d["decision"] not in ("discard", "failed", None)
    ], events


SUMMARY_DIVERGE = """\
import json, os
level = json.load(open(os.environ["AIR_CONFIG_FILE"]))["level"]
print("---")
print("loss:", ["0.5", "nan", "inf"][level])
"""


def test_a_nan_or_inf_in_the_summary_block_is_non_finite_not_a_missing_metric(
    study_home: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(SUMMARY_DIVERGE)
    study = small_study(
        name="summary-diverge",
        workdir=str(work),
        command=["python", "train.py"],
        base_config={"level": 0},
        search_space={"level": {"type": "int", "low": 0, "high": 2}},
        budget={"trials": 3, "concurrency": 1},
    )
    study["noise"] = {"repeats": 0}
    folder = tmp_path / "summary-diverge"
    start_study(study, str(folder), background=False)  # no unknown-metric stop
    events = Journal(folder).read()
    finished = {e["trial"]: e for e in events if e["event"] == "finished"}
    levels = {e["trial"]: e["config"]["level"] for e in events if e["event"] == "proposal"}
    assert sorted(levels.values()) == [0, 1, 2]
    for n, level in levels.items():
        if level:
            assert finished[n]["failure_kind"] == "non-finite", finished[n]
    assert get_study(folder)["best"]["value"] == 0.5
