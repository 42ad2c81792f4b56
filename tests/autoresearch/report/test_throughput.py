"""A study's throughput (issue 41.7): trials per GPU-hour of the study's GPUs and the fraction
of that GPU time its trials ran, in get_study, the report and the page's live part."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autoresearch.journal.journal import replay
from autoresearch.report.cost import study_throughput

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from synthetic_study import write_journal


def _events(*evs: dict) -> list[dict]:
    return [{"ts": 100.0 + i, **e} for i, e in enumerate(evs)]


def test_trials_per_gpu_hour_and_the_busy_fraction() -> None:
    """Three 5-minute trials on 1 GPU each, a study of 2 GPU slots for 1,000 s: 3 trials in
    2,000 GPU-seconds (5.4 per GPU-hour), trials busy 900 of them (0.45)."""
    evs = [{"event": "session_started", "study": {}}]
    for n in range(3):
        evs += [
            {"event": "proposal", "trial": n, "source": "random", "diff": {}, "config": {}},
            {"event": "launched", "trial": n, "job_id": f"j{n}", "gpus": 1},
            {"event": "finished", "trial": n, "status": "SUCCEEDED", "value": 1.0, "gpu_s": 300},
        ]
    state = replay(_events(*evs))
    t = study_throughput(state, wall_s=1000, slot_gpus=2)
    assert t["trials_per_gpu_hour"] == pytest.approx(3 / (2000 / 3600), rel=1e-3)
    assert t["gpu_busy"] == pytest.approx(0.45, rel=1e-3)
    assert study_throughput(state, wall_s=1000, slot_gpus=0)["trials_per_gpu_hour"] is None


def test_get_study_the_report_and_the_page_say_it(tmp_path: Path) -> None:
    from autoresearch.api import get_study
    from autoresearch.report.report import write_report
    from autoresearch.web.live import live_part

    folder = write_journal(tmp_path / "s", 30, name="busy")
    s = get_study(folder)
    t = s["cost"]
    assert t["trials_per_gpu_hour"] > 0 and 0 < t["gpu_busy"] <= 1
    text = Path(write_report(folder)["report"]).read_text()
    assert "**Throughput:**" in text and "trials per GPU-hour" in text
    from autoresearch.report.report import load_state

    _, state = load_state(folder)
    live = live_part(state, s["budget"], "val_loss", alive=False)
    assert live["cost"]["trials_per_gpu_hour"] == pytest.approx(t["trials_per_gpu_hour"], rel=1e-2)
