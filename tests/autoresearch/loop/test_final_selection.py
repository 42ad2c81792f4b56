"""The final selection by re-evaluation and the held-out split (issue 40): real loop, real jobs,
real MLflow. The finalists are exactly the top K within the noise floor, re-run with paired fresh
seeds beside the baseline; the held-out metric exists only in those runs; a pure-noise study
ends with "no held-out gain"; a loop killed mid-final finishes it once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ar_helpers import small_study, start_loop

from autoresearch.api import get_study
from autoresearch.journal.journal import Journal, replay
from autoresearch.loop.loop import run_study
from autoresearch.loop.selection import final
from autoresearch.study.study import parse_study
from autoresearch.web.data import static_view

HOLDOUT = "test_loss"


def holdout_study(**kw: object) -> dict:
    base = {"x": 0.0, "y": 0.0, "steps": 1, "sleep_s": 0.01, "seed": 0, "noise": 0.01,
            "holdout": HOLDOUT, "holdout_noise": 0.01}  # fmt: skip
    study = small_study(
        name="held",
        base_config=base,
        objective={"metric": "loss", "holdout": HOLDOUT},
        noise={"repeats": 2},
        final={"top_k": 2, "seeds": 2},
        budget={"trials": 8, "concurrency": 2},
        sandbox="off",
    )
    study.update(kw)
    return study


def _events(folder: Path, kind: str) -> list[dict]:
    return [e for e in Journal(folder).read() if e["event"] == kind]


def _state_before_final(folder: Path):
    events = Journal(folder).read()
    cut = next(i for i, e in enumerate(events) if e["event"] == "final_started")
    return replay(events[:cut])


def test_final_reevaluates_the_top_k_with_paired_seeds(study_home: Path, tmp_path: Path) -> None:
    study = parse_study(holdout_study())
    folder = tmp_path / "study"
    run_study(study, folder, poll_s=0.1)
    st = replay(Journal(folder).read())
    started, done = st.final_started, st.final_done
    assert started is not None and done is not None
    # exactly the top K within the floor, computed on the state the search ended with
    before = _state_before_final(folder)
    assert started["finalists"] == final.finalists(study, before)
    assert 1 <= len(started["finalists"]) <= 2
    floor = before.noise_floor or 0.0
    values = [before.trials[n].value for n in started["finalists"]]
    assert max(values) - min(values) <= floor * 2 + 1e-12
    reruns = [t for t in st.ordered() if t.source == "final"]
    assert len(reruns) == (1 + len(started["finalists"])) * 2
    by_config: dict[int, list] = {}
    for t in reruns:
        by_config.setdefault(t.final_of, []).append(t.config["seed"])
    assert sorted(by_config) == sorted([0, *started["finalists"]])
    assert all(sorted(s) == sorted(started["seeds"]) for s in by_config.values())  # paired
    search_seeds = {t.config.get("seed") for t in st.ordered() if t.source != "final"}
    assert not set(started["seeds"]) & search_seeds  # fresh
    # the held-out metric only in the final runs; the search never had it
    assert all(HOLDOUT in t.metrics for t in reruns if t.status.value == "SUCCEEDED")
    assert not any(HOLDOUT in t.metrics for t in st.ordered() if t.source != "final")
    # the budget of the search stands apart from the final's
    assert st.search_trials == 8
    assert done["winner"] in started["finalists"]
    assert "held-out" in done["verdict"] and "val" in done["verdict"]
    assert len(_events(folder, "holdout_read")) == len(reruns)
    # every keep or discard names its rule
    judged = [e for e in _events(folder, "decision") if e["decision"] in ("keep", "discard")]
    assert judged and all(e.get("rule") == "noise-floor" for e in judged)
    # the figures reach get_study and the report
    view = get_study(str(folder))
    assert view["final"]["winner"] == done["winner"]
    assert view["final"]["verdict"] == done["verdict"]
    report = (folder / "report.md").read_text()
    assert "Final selection" in report and done["verdict"] in report
    # the page's notes and the terminal summary say it too
    page = static_view("held", folder, study, st)
    assert page["warnings"][0] == f"final selection: trial {done['winner']}: {done['verdict']}"
    status = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "status", str(folder)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "held-out" in status.stdout and "final re-runs" in status.stdout, status.stdout


def test_pure_noise_ends_with_no_held_out_gain(study_home: Path, tmp_path: Path) -> None:
    """x and y do nothing here (the loss is the seed's noise): whatever the search keeps, the
    re-runs with the baseline's seeds show no held-out gain, plainly."""
    data = holdout_study(
        search_space={"z": {"type": "float", "low": -1.0, "high": 1.0}},
        accept="k-sigma(0.5)",
    )
    data["base_config"] = {**data["base_config"], "noise": 0.3, "holdout_noise": 0.3, "z": 0.0}
    folder = tmp_path / "study"
    run_study(parse_study(data), folder, poll_s=0.1)
    st = replay(Journal(folder).read())
    assert st.final_done is not None
    assert st.final_done["holdout_gain"] is False
    assert final.NO_HELDOUT_GAIN in st.final_done["verdict"]
    assert final.NO_HELDOUT_GAIN in (folder / "report.md").read_text()
    judged = [e for e in _events(folder, "decision") if e["decision"] in ("keep", "discard")]
    assert all(e.get("rule") == "k-sigma(0.5)" for e in judged)


@pytest.mark.parametrize("point", ["final_started", "holdout_read"])
def test_a_loop_killed_mid_final_finishes_it_once(
    study_home: Path, tmp_path: Path, point: str
) -> None:
    data = holdout_study(budget={"trials": 5, "concurrency": 2})
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(data))
    folder = tmp_path / "study"
    proc = start_loop(study_file, folder, crash_at=point, poll_s=0.1)
    assert proc.wait(timeout=240) == -9, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    st = replay(Journal(folder).read())
    assert st.final_started is not None and st.final_done is None
    proc = start_loop(study_file, folder, resume=True, poll_s=0.1)
    assert proc.wait(timeout=240) == 0, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    st = replay(Journal(folder).read())
    assert len(_events(folder, "final_started")) == 1
    assert len(_events(folder, "final_done")) == 1
    reruns = [t for t in st.ordered() if t.source == "final"]
    assert len(reruns) == (1 + len(st.final_started["finalists"])) * 2
    jobs = [
        e["job_id"] for e in _events(folder, "launched") if st.trials[e["trial"]].source == "final"
    ]
    assert len(set(jobs)) == len(reruns)  # each run launched once (the same job if relaunched)
    assert all(t.status.value == "SUCCEEDED" for t in reruns)
    assert st.search_trials == 5


def test_a_search_trial_that_logs_the_holdout_is_flagged(study_home: Path, tmp_path: Path) -> None:
    data = holdout_study(budget={"trials": 4, "concurrency": 2}, final=False)
    data["base_config"] = {**data["base_config"], "leak": True}
    folder = tmp_path / "study"
    run_study(parse_study(data), folder, poll_s=0.1)
    st = replay(Journal(folder).read())
    leaks = _events(folder, "holdout_leak")
    assert {e["trial"] for e in leaks} == {
        t.number for t in st.ordered() if t.status.value == "SUCCEEDED"
    }
    assert not any(HOLDOUT in t.metrics for t in st.ordered())  # dropped from the journal
    assert st.final_done is None and st.final_started is None  # final: false
    assert any("logged the held-out metric" in w for w in st.warnings)
    json.dumps(get_study(str(folder)))


EVAL = """\
import json, os
from pathlib import Path
cfg = json.loads(Path(os.environ["AIR_CONFIG_FILE"]).read_text())
assert os.environ["AIR_EVAL_SPLIT"] == "test"
assert Path(os.environ["AIR_CHECKPOINT_DIR"]).parent.name.startswith("job-")
print("---")
print(f"test_loss: {(cfg['x'] - 0.3) ** 2 + (cfg['y'] - 0.6) ** 2 + 0.25}")
"""


def test_a_holdout_command_scores_each_final_run(study_home: Path, tmp_path: Path) -> None:
    """objective.holdout.command: run after each final run, on its checkpoint folder, with
    AIR_EVAL_SPLIT=test; never after a search trial."""
    script = tmp_path / "held_eval.py"
    script.write_text(EVAL)
    data = holdout_study(budget={"trials": 4, "concurrency": 2}, final={"top_k": 1, "seeds": 2})
    data["objective"] = {"metric": "loss", "holdout": {"metric": HOLDOUT,
                                                       "command": f"python {script}"}}  # fmt: skip
    data["base_config"] = {k: v for k, v in data["base_config"].items() if k != "holdout"}
    folder = tmp_path / "study"
    run_study(parse_study(data), folder, poll_s=0.1)
    st = replay(Journal(folder).read())
    reruns = [t for t in st.ordered() if t.source == "final"]
    assert len(reruns) == 4 and all(t.status.value == "SUCCEEDED" for t in reruns)
    for t in reruns:
        x, y = t.config["x"], t.config["y"]
        assert t.metrics[HOLDOUT] == pytest.approx((x - 0.3) ** 2 + (y - 0.6) ** 2 + 0.25)
    assert not any(HOLDOUT in t.metrics for t in st.ordered() if t.source != "final")
    assert st.final_done and st.final_done["holdout_change_pct"] is not None


def test_a_script_that_ignores_the_split_is_said(study_home: Path, tmp_path: Path) -> None:
    data = holdout_study(budget={"trials": 4, "concurrency": 2}, final={"top_k": 1, "seeds": 1})
    data["base_config"] = {k: v for k, v in data["base_config"].items() if k != "holdout"}
    folder = tmp_path / "study"
    run_study(parse_study(data), folder, poll_s=0.1)
    st = replay(Journal(folder).read())
    said = [w for w in st.warnings if "logged no held-out metric" in w]
    assert len(said) == 1 and "AIR_EVAL_SPLIT" in said[0]
    assert st.final_done and final.NO_HELDOUT_GAIN in st.final_done["verdict"]
