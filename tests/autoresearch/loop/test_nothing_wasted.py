"""Nothing silently wasted (issue 38.2): a study checks its own results after the baseline and
the first trials, says what it found (terminal, journal, get_study, report) and stops where the
answer is certain. Real loop, real jobs, real MLflow."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ar_helpers import small_study

from autoresearch.api import get_study
from autoresearch.journal.journal import replay
from autoresearch.loop.loop import run_study
from autoresearch.study.study import parse_study

FAILS = """
import os
raise SystemExit("PermissionError: [Errno 30] Read-only file system: '/root/.cache/torch'")
"""
# Reads no config at all: every trial reports the same number (argparse with no flags given).
IGNORES_CONFIG = """
print("---")
print("loss: 1.3044")
"""
# Uses x but not the seed; fails for every x but the base config's.
FAILS_OFF_BASE = """
import json, os
cfg = json.load(open(os.environ["AIR_CONFIG_FILE"]))
if cfg["x"] != 0.0:
    raise SystemExit("ValueError: x must be 0 in this model")
print("---")
print("loss: %r" % (1.0 + cfg["x"] ** 2))
"""


def study_of(tmp_path: Path, source: str, **kw: object):
    script = tmp_path / "train.py"
    script.write_text(source)
    study = small_study(
        command=[sys.executable, str(script)],
        workdir=str(tmp_path),
        config_as="file",
        **kw,
    )
    return parse_study(study)


def run(study, folder: Path):
    lines: list[str] = []
    result = run_study(study, folder, poll_s=0.1, log=lines.append)
    return result, "\n".join(lines)


@pytest.fixture(autouse=True)
def _no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")


def test_failing_baseline_stops_the_study_before_any_trial(
    study_home: Path, tmp_path: Path
) -> None:
    study = study_of(tmp_path, FAILS, budget={"trials": 8, "concurrency": 4})
    folder = tmp_path / "study"
    result, said = run(study, folder)
    assert result.stop_reason == "baseline-failed"
    assert sorted(result.state.trials) == [0]  # no trial beside it, none after it
    assert "Read-only file system" in said and "check [baseline-failed]" in said
    summary = get_study(folder)
    assert summary["state"] == "failed"
    assert summary["checks"][0]["code"] == "baseline-failed"
    assert "Read-only file system" in summary["checks"][0]["message"]
    assert summary["noise"]["floor"] is None  # never "noise floor: 0" from no run
    assert "Read-only file system" in (folder / "report.md").read_text()
    jobs = study_home / "jobs" / result.state.trials[0].job_id
    assert summary["recent"][0]["outputs"] == [str(jobs / "checkpoints")]  # named (38.6)


def test_a_script_that_ignores_its_config_is_caught_and_stopped(
    study_home: Path, tmp_path: Path
) -> None:
    study = study_of(tmp_path, IGNORES_CONFIG, budget={"trials": 10, "concurrency": 2})
    folder = tmp_path / "study"
    result, said = run(study, folder)
    assert result.stop_reason == "config-ignored"
    assert len(result.state.trials) < 10  # the budget was not spent on the same number
    summary = get_study(folder)
    check = next(c for c in summary["checks"] if c["code"] == "config-ignored")
    assert "bit-identical" in check["message"] and "AIR_CONFIG_FILE" in check["fix"]
    assert any("config-ignored" in w for w in summary["warnings"])
    journal = [json.loads(x) for x in (folder / "journal.jsonl").read_text().splitlines()]
    assert any(e["event"] == "check" and e["code"] == "config-ignored" for e in journal)
    assert "AIR_CONFIG_FILE" in said


def test_seed_repeats_that_are_bit_identical_are_said(study_home: Path, tmp_path: Path) -> None:
    study = study_of(
        tmp_path,
        FAILS_OFF_BASE,
        budget={"trials": 3, "concurrency": 3},
        noise={"repeats": 2},
        stop_after_same_failures=0,
    )
    folder = tmp_path / "study"
    result, _ = run(study, folder)
    codes = [c["code"] for c in replay_checks(folder)]
    assert "seed-ignored" in codes, codes


def test_same_failure_everywhere_stops_after_n(study_home: Path, tmp_path: Path) -> None:
    from autoresearch.journal.journal import StudyState
    from autoresearch.loop import waste

    study = study_of(tmp_path, FAILS, stop_after_same_failures=3)
    state = StudyState()  # three trials that failed alike (a job id apart), none succeeding
    for n in range(3):
        state.apply({"event": "proposal", "trial": n, "source": "tpe" if n else "x", "config": {}})
        state.apply({"event": "launched", "trial": n, "job_id": f"job-{n}"})
        tail = f"Traceback\nOSError: [Errno 30] Read-only file system: job-{n}"
        state.apply({"event": "finished", "trial": n, "status": "FAILED", "failure_kind": "user",
                     "log_tail": tail})  # fmt: skip
    found = waste.same_failure(study, state)
    assert found is not None and found.stop and found.trials == [0, 1, 2]
    state.trials[2].log_tail = "ValueError: something else"
    assert waste.same_failure(study, state) is None


def replay_checks(folder: Path) -> list[dict]:
    events = [json.loads(x) for x in (folder / "journal.jsonl").read_text().splitlines()]
    return replay(events).checks
