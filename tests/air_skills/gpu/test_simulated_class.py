"""39.6: simulated GPUs and CPU slots on one machine are one hardware class for comparison."""

from __future__ import annotations

from pathlib import Path

from air_skills.gpu.hardware import describe, gpu_class, not_comparable
from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.loop.decisions import off_baseline_class
from autoresearch.report.hardware import trial_class


def test_a_simulated_gpu_compares_with_a_cpu_slot(air_home: Path) -> None:
    assert gpu_class("Simulated GPU", 81920) == "CPU"
    assert describe([0])["class"] == "CPU" and describe([0, 1])["class"] == "CPU"
    assert describe([])["class"] == "CPU"
    # an older record's words for a simulated GPU compare too; real classes still differ
    assert not_comparable(["CPU", "Simulated GPU 80GB", "2x Simulated GPU 80GB"]) is None
    assert not_comparable(["CPU", "H100 80GB"]) == "not comparable: CPU vs H100 80GB"


def test_a_trial_on_simulated_gpus_is_judged_against_a_cpu_slot_baseline() -> None:
    base = Trial(number=0, diff={}, config={}, source="baseline", status=TrialStatus.SUCCEEDED,
                 value=0.4, job_id="job-a")  # fmt: skip
    trial = Trial(number=1, diff={"lr": 1}, config={}, source="tpe",
                  status=TrialStatus.SUCCEEDED, value=0.3, job_id="job-b", gpus=2,
                  gpu_type="Simulated GPU,Simulated GPU")  # fmt: skip

    class State:
        trials = {0: base}

    assert trial_class(base) == trial_class(trial) == "CPU"
    assert base.is_noise and not off_baseline_class(trial, State())  # type: ignore[arg-type]
