"""Issue 38.2: no trial runs before the baseline has a result. A baseline that fails (here a
write the sandbox refuses) stops the study before any trial, with concurrency 4: air's job
list holds the baseline's job alone, and its own error and the sandbox's reason are in the
terminal, the journal, get_study and the page; `autoresearch run` exits 3 (the study failed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from ar_helpers import small_study

from autoresearch.api import get_study
from autoresearch.journal.journal import Journal

# A write outside the job's folder: the sandbox (bubblewrap) refuses it.
WRITES_OUTSIDE = """
import os, sys
target = sys.argv[1]
with open(target, "w") as f:
    f.write("x")
print("---")
print("loss: 1.0")
"""
STUDY_FAILED = 3  # autoresearch run: the study ran and failed (cli.py, docs/configuration.md)


def _run(study_file: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "autoresearch.cli", "run", str(study_file), "--dir", str(folder)]
    return subprocess.run([*cmd, "--poll-s", "0.2"], capture_output=True, text=True, timeout=240)


def test_a_failing_baseline_stops_the_study_before_any_trial(
    study_home: Path, tmp_path: Path
) -> None:
    from air_skills import Client

    outside = tmp_path / "outside"
    outside.mkdir()
    script = tmp_path / "train.py"
    script.write_text(WRITES_OUTSIDE)
    data = small_study(
        name="baseline-first",
        command=[sys.executable, str(script), str(outside / "cache.bin")],
        workdir=str(tmp_path),
        config_as="file",
        budget={"trials": 8, "concurrency": 4},
        noise={"repeats": 2},
    )
    data.pop("sandbox", None)
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(data))
    folder = tmp_path / "study"
    res = _run(study_file, folder)

    assert res.returncode == STUDY_FAILED, res.stderr[-3000:]
    assert not (outside / "cache.bin").exists()  # the sandbox refused the write
    said = res.stderr
    assert "check [baseline-failed]" in said and "Read-only file system" in said, said[-3000:]
    assert "it ran sandboxed" in said  # the sandbox's reason, not only the job's error
    # the journal: the baseline alone was proposed and launched, nothing beside it
    events = Journal(folder).read()
    assert [e["trial"] for e in events if e["event"] == "proposal"] == [0]
    assert [e["trial"] for e in events if e["event"] == "launched"] == [0]
    check = next(e for e in events if e["event"] == "check")
    assert check["code"] == "baseline-failed" and "it ran sandboxed" in check["message"]
    # air's own job list: one job, the baseline's
    jobs = Client().list(limit=100).items
    assert [j.job_id for j in jobs] == [e["job_id"] for e in events if e["event"] == "launched"]
    # get_study and the page
    summary = get_study(folder)
    assert summary["state"] == "failed" and summary["stop_reason"] == "baseline-failed"
    assert "Read-only file system" in summary["checks"][0]["message"]
    from autoresearch.web.data import StudyIndex

    view = StudyIndex([folder], live_metrics=False).view("baseline-first")
    assert view is not None and view["state"] == "failed"
    assert any("baseline-failed" in w and "it ran sandboxed" in w for w in view["warnings"])


def test_a_good_study_exits_0(study_home: Path, tmp_path: Path) -> None:
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(small_study(name="good", budget={"trials": 2})))
    res = _run(study_file, tmp_path / "study")
    assert res.returncode == 0, res.stderr[-3000:]
