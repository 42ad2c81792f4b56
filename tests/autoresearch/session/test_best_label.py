"""What "best" is, said wherever it is shown (issue 24): a mean over runs says so and matches
the runs' rows; a single run names its trial; a budget that holds only the baseline and its
repeats says so before the first trial."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from ar_helpers import small_study

from autoresearch.api import get_study, start_study
from autoresearch.journal.journal import Journal


def test_a_budget_of_only_repeats_warns_first_and_the_best_mean_is_labelled(
    study_home: Path, tmp_path: Path
) -> None:
    study = small_study(name="repeats", budget={"trials": 3, "concurrency": 3})
    study["base_config"] = {**study["base_config"], "noise": 0.05}
    study["noise"] = {"repeats": 2}
    folder = tmp_path / "repeats"
    start_study(study, str(folder), background=False)
    events = Journal(folder).read()
    warned = next(n for n, e in enumerate(events) if e["event"] == "warning")
    launched = next(n for n, e in enumerate(events) if e["event"] == "launched")
    assert warned < launched and "no search trial will run" in events[warned]["message"]
    summary = get_study(folder)
    assert any("no search trial will run" in w for w in summary["warnings"])
    values = [e["value"] for e in events if e["event"] == "finished"]
    assert len(values) == 3
    label = summary["best"]["label"]
    assert label == f"{statistics.fmean(values):.5g}, mean of 3 runs (trial 0 and its repeats)"
    shown = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "status", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "mean of 3 runs" in shown.stdout, shown.stdout + shown.stderr


def test_a_single_run_best_names_its_trial(study_home: Path, tmp_path: Path) -> None:
    study = small_study(name="single", budget={"trials": 1, "concurrency": 1})
    study["noise"] = {"repeats": 0}
    folder = tmp_path / "single"
    start_study(study, str(folder), background=False)
    best = get_study(folder)["best"]
    assert best["label"] == f"{best['value']:.5g}, trial 0's run"
