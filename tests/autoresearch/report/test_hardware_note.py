"""A study whose trials ran on different hardware classes says so: get_study's warnings, the
page's note and each trial's class (issue 27)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from synthetic_study import write_journal

from autoresearch.api import get_study
from autoresearch.report.report import load_state
from autoresearch.web.data import study_view


def test_mixed_hardware_is_flagged(tmp_path: Path) -> None:
    folder = write_journal(tmp_path / "mixed", 12, name="mixed", other_gpu_from=8)
    note = "not comparable: A10G vs H100 80GB"
    assert any(w.startswith(note) for w in get_study(folder)["warnings"])
    study, state = load_state(folder)
    view = study_view("mixed", folder, study, state)
    assert view["hardware_note"] == note
    assert {r["hardware"] for r in view["trials"]} == {"H100 80GB", "A10G"}


def test_one_class_is_not_flagged(tmp_path: Path) -> None:
    folder = write_journal(tmp_path / "same", 12, name="same")
    assert not any("not comparable" in w for w in get_study(folder)["warnings"])
    study, state = load_state(folder)
    assert study_view("same", folder, study, state)["hardware_note"] is None


def test_a_trial_on_another_class_than_the_baseline_is_not_judged(tmp_path: Path) -> None:
    from autoresearch.loop.decisions import decide_trial
    from autoresearch.report.summary import DECISIONS

    folder = write_journal(tmp_path / "mixed", 12, name="mixed", other_gpu_from=8)
    study, state = load_state(folder)
    assert study.hardware == "same"  # the default
    on_a10g, on_h100 = state.trials[9], state.trials[7]
    assert decide_trial(on_a10g, study, state, floor_known=True).decision == "incomparable"
    assert decide_trial(on_h100, study, state, floor_known=True).decision in ("keep", "discard")
    anyhw = study.model_copy(update={"hardware": "any"})
    assert decide_trial(on_a10g, anyhw, state, floor_known=True).decision in ("keep", "discard")
    assert DECISIONS["incomparable"].startswith("incomparable: ran on another hardware class")
