"""Journal lines that are valid JSON of the wrong types or shapes: each is skipped whole with its
reason, the good lines around it apply, and status, report and a resumed study carry on."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ar_helpers import small_study

from autoresearch.api import get_study
from autoresearch.journal.journal import Journal, StudyState, TrialStatus, replay
from autoresearch.journal.journal_check import MAX_DEPTH
from autoresearch.report.report import render_markdown
from autoresearch.report.summary import summarize
from autoresearch.study.study import parse_study

STUDY = parse_study(small_study(name="types", budget={"trials": 3, "concurrency": 1}))


def _good_start(folder: Path) -> Journal:
    """A study whose trial 0 runs and trial 1 is proposed, not launched."""
    folder.mkdir(exist_ok=True)
    j = Journal(folder)
    j.append("session_started", study=STUDY.to_dict(), study_id="s1", gpus_per_trial=0)
    j.append("proposal", trial=0, source="baseline", diff={}, config=STUDY.config_for({}))
    j.append("launched", trial=0, job_id="job-0000000000", run_id=None, attempt=1, gpus=0)
    j.append("proposal", trial=1, source="random", diff={"x": 0.5}, config={"x": 0.5})
    return j


def _good_end(j: Journal) -> None:
    j.append("finished", trial=0, status="SUCCEEDED", value=0.25, started_at=1.0, ended_at=2.0,
             metrics={"loss": 0.25}, curve=[[0, 0.5], [2, 0.25]], gpu_s=0.0)  # fmt: skip
    j.append("decision", trial=0, decision="baseline", value=0.25, best_trial=0, best_value=0.25)


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


# (a hostile line, a piece of the reason it is skipped for)
HOSTILE: list[tuple[str, str]] = [
    ('{"event": 5}', "'event' must be a string"),
    ('"a string"', "not an event object"),
    ("[1, 2]", "not an event object"),
    ("null", "not an event object"),
    ("12", "not an event object"),
    ('{"no_event": 1}', "'event' must be a string"),
    ('{"event": "finished", "trial": "seven", "status": "FAILED"}', "'trial' must be a non-neg"),
    ('{"event": "finished", "trial": true, "status": "FAILED"}', "'trial' must be a non-neg"),
    ('{"event": "warning", "trial": [0], "message": "m"}', "'trial' must be a non-negative"),
    ('{"event": "proposal", "trial": -1}', "'trial' must be a non-negative integer"),
    ('{"event": "proposal", "trial": 1.5}', "'trial' must be a non-negative integer"),
    ('{"event": "proposal", "trial": 0, "config": {}}', "trial 0 was already proposed"),
    ('{"event": "proposal", "trial": 2, "config": [1, 2]}', "'config' must be an object"),
    ('{"event": "proposal", "trial": 2, "diff": "x=1"}', "'diff' must be an object"),
    ('{"event": "proposal", "trial": 2, "source": null}', "'source' must be a string"),
    ('{"event": "proposal", "trial": 2, "parent": 99}', "parent 99 is no trial before it"),
    ('{"event": "proposal", "trial": 2, "patch_summary": {"files": 3}}', "'patch_summary'"),
    ('{"event": "proposal", "trial": 2, "config": ' + _nested(MAX_DEPTH + 2) + "}", "nested at"),
    ("[" * 100_000 + "]" * 100_000, "cannot be read (RecursionError)"),
    ('{"event": "warning", "message": ' + _nested(900) + "}", "not an object of 1 key(s)"),
    ('{"event": "llm_call", "usd": "' + "x" * 10**6 + '"}', "finite number, not 'xxxxxx"),
    ('{"event": "fallback", "count": ' + "9" * 5000 + "}", "cannot be read (ValueError)"),
    ('{"event": "launched", "trial": 0, "job_id": ["j"]}', "'job_id' must be a string"),
    ('{"event": "launched", "trial": 0}', "'job_id' is missing"),
    ('{"event": "launched", "trial": 0, "job_id": "j", "attempt": null}', "'attempt' must be"),
    ('{"event": "launched", "trial": 0, "job_id": "j", "gpus": "all"}', "'gpus' must be"),
    ('{"event": "launched", "trial": 7, "job_id": "j"}', "trial 7 was never proposed"),
    ('{"event": "job_started", "trial": 0, "started_at": "yesterday"}', "'started_at' must"),
    ('{"event": "job_started", "trial": 1}', "trial 1 was never launched"),
    ('{"event": "infra_retry", "trial": 0, "gpu_s": -3}', "'gpu_s' must be a non-negative"),
    ('{"event": "pruned", "trial": 0, "curve": [[1]]}', "'curve' must be a list of [step"),
    ('{"event": "pruned", "trial": 0, "value": "low"}', "'value' must be a number"),
    ('{"event": "finished", "trial": 9, "status": "SUCCEEDED", "value": 1}', "never proposed"),
    ('{"event": "finished", "trial": 1, "status": "SUCCEEDED", "value": 1}', "never launched"),
    ('{"event": "finished", "trial": 0, "status": "DONE"}', "'status' must be one of"),
    ('{"event": "finished", "trial": 0, "status": null}', "'status' must be one of"),
    ('{"event": "finished", "trial": 0}', "'status' is missing"),
    ('{"event": "finished", "trial": 0, "status": "SUCCEEDED", "value": "0.1"}', "be a number"),
    ('{"event": "finished", "trial": 0, "status": "SUCCEEDED", "value": NaN}', "finite 'value'"),
    ('{"event": "finished", "trial": 0, "status": "SUCCEEDED", "value": Infinity}', "finite"),
    ('{"event": "finished", "trial": 0, "status": "SUCCEEDED"}', "finite 'value', not None"),
    ('{"event": "finished", "trial": 0, "status": "FAILED", "metrics": {"l": "x"}}', "numbers"),
    ('{"event": "finished", "trial": 0, "status": "FAILED", "gpu_s": null}', "'gpu_s' must"),
    ('{"event": "finished", "trial": 0, "status": "FAILED", "failure": {"a": 1}}', "'failure'"),
    ('{"event": "decision", "trial": 0, "decision": "keep", "best_value": 1}', "not ended"),
    ('{"event": "decision", "trial": 5, "decision": "keep", "best_value": 1}', "never proposed"),
    ('{"event": "decision", "trial": 0}', "'decision' is missing"),
    ('{"event": "tampered", "trial": 1, "files": ["a"]}', "trial 1 was never launched"),
    ('{"event": "tampered", "trial": 0, "files": "a"}', "'files' must be a list of strings"),
    ('{"event": "noise_floor", "values": "abc"}', "'values' must be a list of numbers"),
    ('{"event": "noise_floor", "values": [1], "floor": -1}', "'floor' must be a non-neg"),
    ('{"event": "llm_call", "usd": "free"}', "'usd' must be a non-negative finite number"),
    ('{"event": "llm_call", "usd": Infinity}', "'usd' must be a non-negative finite number"),
    ('{"event": "llm_call", "input_tokens": 1e3}', "'input_tokens' must be a non-negative"),
    ('{"event": "llm_call", "ok": "no"}', "'ok' must be true or false"),
    ('{"event": "fallback", "count": 1.5}', "'count' must be a non-negative integer"),
    ('{"event": "warning", "message": null}', "'message' must be a string"),
    ('{"event": "error", "code": {"x": 1}}', "'code' must be a string"),
    ('{"event": "stopped"}', "'reason' is missing"),
    ('{"event": "mlflow_parent", "run_id": 7}', "'run_id' must be a string"),
    ('{"event": "session_started", "study": "types"}', "'study' must be an object"),
    ('{"event": "session_started", "gpus_per_trial": "one"}', "'gpus_per_trial' must be"),
    ('{"event": "study_updated", "study": [1]}', "'study' must be an object"),
    ('{"event": "heartbeat", "ts": "now"}', "'ts' must be a finite number"),
    ('{"event": "heartbeat", "ts": NaN}', "'ts' must be a finite number"),
    (
        '{"event": "code_base", "digest": "d", "root": "/r", "cwd": "", "code": {"bogus": 1}}',
        "not a study's code section",
    ),
    ('{"event": "code_base", "digest": "d", "cwd": "", "code": {}}', "'root' is missing"),
    ('{"event": "code_base", "code": {}}', "'digest' is missing"),
]


def _journal_with(folder: Path, *lines: str) -> Journal:
    j = _good_start(folder)
    with open(j.path, "a") as f:
        f.write("".join(line + "\n" for line in lines))
    _good_end(j)
    return j


def _skipped(j: Journal) -> tuple[StudyState, str | None]:
    st = replay(j.read())
    return st, j.skipped_warning(st)


def _asserts_good_records_applied(st: StudyState) -> None:
    assert st.study == STUDY.to_dict() and st.sessions == 1
    t0, t1 = st.trials[0], st.trials[1]
    assert t0.status == TrialStatus.SUCCEEDED and t0.value == 0.25 and t0.job_id
    assert t0.metrics == {"loss": 0.25} and t0.attempt == 1 and t0.decision == "baseline"
    assert t1.status == TrialStatus.PROPOSED and t1.job_id is None and t1.diff == {"x": 0.5}
    assert st.best_trial == 0 and st.best_value == 0.25
    assert st.llm_usd == 0.0 and st.fallbacks == 0 and st.stopped is None


@pytest.mark.parametrize(("line", "reason"), HOSTILE, ids=[r for _, r in HOSTILE])
def test_a_hostile_line_is_skipped_with_its_reason(tmp_path: Path, line: str, reason: str) -> None:
    j = _journal_with(tmp_path / "study", line)
    st, warning = _skipped(j)
    _asserts_good_records_applied(st)
    assert warning is not None and warning.startswith("1 line(s) of ")
    assert "line 5: " in warning and reason in warning, warning
    assert len(warning) < 400  # a huge bad value is not quoted whole


def test_a_skipped_record_leaves_no_trace_in_the_state(tmp_path: Path) -> None:
    """Whole or nothing: the state after a skipped line equals the state without it."""
    clean = replay(_journal_with(tmp_path / "clean").read())
    for i, (line, _) in enumerate(HOSTILE):
        st = replay(_journal_with(tmp_path / f"s{i}", line).read())
        assert _snapshot(st, skipped=False) == _snapshot(clean, skipped=False), line


def _snapshot(st: StudyState, skipped: bool = True) -> str:
    data = dataclasses.asdict(st)
    data.pop("last_ts")  # the clock: each journal was written at its own time
    data.pop("started_ts")
    data.pop("_session_start")
    for t in data["trials"].values():
        t.pop("proposed_at"), t.pop("launched_at")
    if not skipped:
        data.pop("skipped")
    return json.dumps(data, default=str, sort_keys=True)


def test_get_study_and_the_report_read_a_journal_of_every_hostile_line(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    _journal_with(folder, *(line for line, _ in HOSTILE))
    summary = get_study(folder)
    assert summary["name"] == "types" and summary["best"]["trial"] == 0
    assert summary["trials"]["succeeded"] == 1 and summary["trials"]["proposed"] == 1
    warning = next(w for w in summary["warnings"] if "not valid study events" in w)
    assert warning.startswith(f"{len(HOSTILE)} line(s) of ")
    assert "line 5: 'event' must be a string, not 5" in warning
    assert f"and {len(HOSTILE) - 3} more" in warning
    from autoresearch.report.report import load_state

    study, st = load_state(folder)
    assert "| 0 |" in render_markdown(folder, study, st, "plot.png")


def test_autoresearch_status_json_on_a_hostile_journal(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    _journal_with(folder, *(line for line, _ in HOSTILE[:12]))
    res = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "status", str(folder), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["trials"]["total"] == 2 and out["best"]["value"] == 0.25
    assert any(w.startswith("12 line(s) of ") for w in out["warnings"]), out["warnings"]


# Values of every JSON type, the hostile ones first.
JUNK: list[Any] = [None, True, -1, 0, 2**40, 1.5, float("nan"), float("inf"), "", "x", [],
                   [1], [[1, "a"]], {}, {"a": None}, {"files": {"f": [1]}},
                   {"n": 2, "mean": "m"}]  # fmt: skip


def _good_records() -> list[dict[str, Any]]:
    return [
        {"event": "proposal", "trial": 2, "source": "r", "diff": {"x": 0.1}, "config": {"x": 0.1},
         "rationale": "r", "patch": "p", "parent": 0, "confirms": 0,
         "patch_summary": {"files": {"a.py": [1, 0]}}},
        {"event": "launched", "trial": 1, "job_id": "j1", "run_id": "r", "attempt": 1, "gpus": 0,
         "code_digest": "d", "gpu_type": "H100"},
        {"event": "job_started", "trial": 0, "started_at": 1.5},
        {"event": "infra_retry", "trial": 0, "gpu_s": 2.0},
        {"event": "pruned", "trial": 0, "value": 0.3, "step": 1, "reason": "r",
         "curve": [[1, 0.3]]},
        {"event": "finished", "trial": 0, "status": "FAILED", "value": float("nan"), "steps": 2,
         "failure": "f", "failure_kind": "user", "log_tail": "t", "started_at": 1.0,
         "ended_at": 2.0, "curve": [[0, 1.0]], "metrics": {"m": 1}, "gpu_s": 1.0, "run_id": "r"},
        {"event": "tampered", "trial": 0, "files": ["a"]},
        {"event": "decision", "trial": 0, "decision": "keep", "value": 0.2, "best_value": 0.2,
         "confirmed": {"n": 2, "mean": 0.2, "std": 0.01}},
        {"event": "noise_floor", "values": [1.0, 1.1], "std": 0.07, "floor": 0.14},
        {"event": "llm_call", "usd": 0.1, "input_tokens": 5, "output_tokens": 3, "ok": False},
        {"event": "fallback", "count": 2},
        {"event": "warning", "message": "w"},
        {"event": "error", "code": "c", "message": "m", "hint": "h"},
        {"event": "stopped", "reason": "budget:trials", "detail": "d"},
        {"event": "mlflow_parent", "run_id": "r", "experiment_id": "1"},
        {"event": "study_updated", "study": STUDY.to_dict()},
        {"event": "session_started", "study": STUDY.to_dict(), "study_id": "s",
         "gpus_per_trial": 1},
    ]  # fmt: skip


def test_fuzzed_records_never_raise_and_apply_whole_or_not_at_all(tmp_path: Path) -> None:
    """Each field of each kind of record, set to each junk value (and removed): replay never
    raises, a skipped record changes nothing, and the study still renders."""
    prefix = _journal_with(tmp_path / "study").read()  # trial 0 ended and decided, 1 proposed
    before = _snapshot(replay(prefix), skipped=False)
    rng = random.Random(19)
    cases = 0
    for good in _good_records():
        for key in [k for k in good if k != "event"]:
            for junk in [*JUNK, ...]:
                ev = {**good, "ts": 9.0}
                if junk is ...:
                    del ev[key]
                else:
                    ev[key] = junk
                st = replay([*prefix, ev])  # must not raise
                cases += 1
                if st.skipped:
                    assert _snapshot(st, skipped=False) == before, ev
                elif rng.random() < 0.1:  # applied: what reads the state still works
                    render_markdown(tmp_path, STUDY, st, "plot.png")
                    summarize(tmp_path, STUDY, st)
    assert cases > 1000


@pytest.mark.slow
def test_a_resumed_study_continues_from_the_good_records(study_home: Path, tmp_path: Path) -> None:
    """A killed study whose journal was then vandalised: the resumed loop runs the proposed
    trial and finishes its budget; the hostile lines changed nothing."""
    folder = tmp_path / "study"
    data = small_study(name="types", budget={"trials": 3, "concurrency": 1}, proposer="random")
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(data))
    folder.mkdir()
    j = Journal(folder)
    j.append("session_started", study=parse_study(data).to_dict(), study_id="s1",
             gpus_per_trial=0)  # fmt: skip
    j.append(
        "proposal", trial=0, source="baseline", diff={}, config=parse_study(data).config_for({})
    )
    with open(j.path, "a") as f:
        for line, _ in HOSTILE:
            f.write(line + "\n")
    res = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "run", str(study_file), "--dir", str(folder),
         "--poll-s", "0.2", "--resume", "--json"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    st = replay(j.read())
    assert len(st.skipped) + len(j.skipped) == len(HOSTILE)  # every hostile line, none else
    assert st.stopped and st.stopped["reason"] == "budget:trials"
    assert sorted(st.trials) == [0, 1, 2] and st.sessions == 2
    assert all(t.status == TrialStatus.SUCCEEDED for t in st.ordered())
    assert st.trials[0].source == "baseline" and st.best_trial is not None
