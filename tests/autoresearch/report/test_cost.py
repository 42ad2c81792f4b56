"""Cost per trial and per study: GPU-hours times a price by GPU model (or one flat price), and
each trial's share of the LLM calls of the round that proposed it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autoresearch.journal.journal import replay
from autoresearch.report.cost import Pricing, gpu_price, study_cost, trial_cost

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from synthetic_study import write_journal


@pytest.fixture(autouse=True)
def _no_price_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIR_GPU_PRICE_USD_PER_HOUR", raising=False)
    monkeypatch.delenv("AIR_GPU_PRICES", raising=False)


@pytest.mark.parametrize(
    ("gpu", "price"),
    [
        ("NVIDIA H100 80GB HBM3", 3.0),
        ("NVIDIA A10G", 1.0),  # not read as the cheaper "A10"
        ("NVIDIA A10", 0.8),
        ("Tesla T4", 0.4),
        ("NVIDIA A10G, NVIDIA H100 80GB HBM3", 3.0),  # a mixed gang: the dearest
        ("Simulated GPU", 0.0),
        (None, 0.0),  # a CPU-only trial costs nothing in GPU-hours
    ],
)
def test_the_table_prices_a_gpu_by_its_model(gpu: str | None, price: float) -> None:
    assert gpu_price(gpu) == price


def test_settings_override_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_GPU_PRICES", "H100=2.25, Simulated=0.5")
    assert gpu_price("NVIDIA H100 80GB HBM3") == 2.25
    assert gpu_price("Simulated GPU") == 0.5
    assert gpu_price("NVIDIA A10G") == 1.0  # rows it does not name keep the table's price
    monkeypatch.setenv("AIR_GPU_PRICE_USD_PER_HOUR", "4")
    assert gpu_price("NVIDIA A10G") == 4.0 and Pricing().source == "AIR_GPU_PRICE_USD_PER_HOUR"


def _events(*evs: dict) -> list[dict]:
    return [{"ts": 100.0 + i, **e} for i, e in enumerate(evs)]


def _proposal(n: int, source: str = "llm") -> dict:
    return {"event": "proposal", "trial": n, "source": source, "diff": {}, "config": {}}


def test_llm_dollars_are_shared_among_the_trials_of_their_round() -> None:
    state = replay(
        _events(
            {"event": "session_started", "study": {}},
            _proposal(0, "baseline"),
            {"event": "llm_call", "usd": 0.03, "ok": True},
            {"event": "llm_call", "usd": 0.01, "ok": True},  # a retry: same round
            _proposal(1),
            _proposal(2),
            {"event": "llm_call", "usd": 0.05, "ok": True},
            _proposal(3),
            _proposal(4, "noise"),  # runs of the base config are not the LLM's
        )
    )
    shares = {n: t.llm_usd for n, t in state.trials.items()}
    assert shares == pytest.approx({0: 0.0, 1: 0.02, 2: 0.02, 3: 0.05, 4: 0.0})
    assert state.llm_usd == pytest.approx(0.09)


def test_a_trial_costs_its_gpu_hours_at_its_price_plus_its_llm_share() -> None:
    state = replay(
        _events(
            {"event": "session_started", "study": {}},
            {"event": "llm_call", "usd": 0.1, "ok": True},
            _proposal(0),
            {"event": "launched", "trial": 0, "job_id": "j0", "gpus": 2, "gpu_type": "A100"},
            {"event": "finished", "trial": 0, "status": "SUCCEEDED", "value": 1.0, "gpu_s": 7200},
            {"event": "decision", "trial": 0, "decision": "keep", "value": 1.0},
        )
    )
    cost = trial_cost(state.trials[0])
    assert cost == pytest.approx({"gpu_hours": 2.0, "gpu_usd": 3.6, "llm_usd": 0.1, "usd": 3.7})
    total = study_cost(state)
    assert total["usd"] == pytest.approx(3.7) and total["kept_improvements"] == 1
    assert total["usd_per_improvement"] == pytest.approx(3.7)


def test_get_study_reports_the_cost(tmp_path: Path) -> None:
    from autoresearch.api import get_study

    folder = write_journal(tmp_path / "s", 30, name="costly")
    s = get_study(folder)
    # 30 trials x 48 GPU-seconds on an H100 at $3/h, and 27 LLM rounds of $0.002
    assert s["cost"]["gpu_hours"] == pytest.approx(30 * 48 / 3600, rel=1e-3)
    assert s["cost"]["gpu_usd"] == pytest.approx(30 * 48 / 3600 * 3.0, rel=1e-3)
    assert s["cost"]["llm_usd"] == pytest.approx(27 * 0.002, rel=1e-3)
    assert s["cost"]["usd_per_improvement"] == pytest.approx(
        s["cost"]["usd"] / s["cost"]["kept_improvements"], rel=1e-3
    )
    assert all("cost_usd" in r for r in s["recent"])
