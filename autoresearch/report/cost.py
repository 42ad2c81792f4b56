"""What trials and studies cost: GPU-hours times a price per GPU-hour, plus LLM dollars.

The price of a GPU-hour is ``AIR_GPU_PRICE_USD_PER_HOUR`` when set (every model), else the
model's row in ``AIR_GPU_PRICES`` (``MODEL=PRICE,...``), else the small table below (rough
on-demand cloud prices; 0 for unknown and simulated GPUs, and a CPU-only trial costs nothing).
A trial's LLM dollars are its share of the calls of the round that proposed it.
"""

from __future__ import annotations

import time
from typing import Any

from air_skills import settings
from autoresearch.journal.journal import StudyState, Trial

# Rough on-demand cloud dollars per GPU-hour by model (a name that contains the key matches;
# longer keys are tried first, so "A10G" is not read as "A10"). Override with AIR_GPU_PRICES.
GPU_PRICES_USD_PER_HOUR: dict[str, float] = {
    "B200": 6.0,
    "H200": 4.0,
    "H100": 3.0,
    "A100": 1.8,
    "L40S": 1.2,
    "A10G": 1.0,
    "A10": 0.8,
    "L4": 0.7,
    "V100": 0.9,
    "T4": 0.4,
    "RTX 4090": 0.5,
    "RTX 3090": 0.3,
    "RTX 3060": 0.15,
}


def price_table() -> dict[str, float]:
    """The built-in table with AIR_GPU_PRICES' rows on top."""
    table = dict(GPU_PRICES_USD_PER_HOUR)
    for pair in (settings.get("AIR_GPU_PRICES") or "").split(","):
        if "=" in pair:
            model, _, price = pair.partition("=")
            table[model.strip()] = float(price)
    return table


class Pricing:
    """Dollars per GPU-hour by GPU model name, read from the settings once."""

    def __init__(self) -> None:
        flat = settings.get("AIR_GPU_PRICE_USD_PER_HOUR")
        self.flat = None if flat is None else float(flat)
        self.table = price_table()
        self._keys = sorted(self.table, key=len, reverse=True)
        self._memo: dict[str | None, float] = {}
        self.source = (
            "AIR_GPU_PRICE_USD_PER_HOUR"
            if self.flat is not None
            else "AIR_GPU_PRICES and the built-in table by GPU model"
        )

    def per_hour(self, gpu_type: str | None) -> float:
        """Dollars per GPU-hour of a GPU model name (several models, "A, B": the dearest)."""
        if self.flat is not None:
            return self.flat
        if gpu_type not in self._memo:
            prices = [
                next((self.table[k] for k in self._keys if k.upper() in name.upper()), 0.0)
                for name in (gpu_type or "").split(",")
                if name.strip()
            ]
            self._memo[gpu_type] = max(prices, default=0.0)
        return self._memo[gpu_type]


def gpu_price(gpu_type: str | None) -> float:
    """Dollars per GPU-hour of a GPU model name, by the current settings."""
    return Pricing().per_hour(gpu_type)


def trial_gpu_hours(t: Trial, now: float | None = None) -> float:
    """GPU-hours a trial has used (a running one up to ``now``)."""
    seconds = t.gpu_s
    if not t.job_done and t.started_at is not None:
        seconds += max(0.0, (now or time.time()) - t.started_at) * t.gpus
    return seconds / 3600.0


def trial_cost(t: Trial, now: float | None = None, pricing: Pricing | None = None) -> dict:
    """{gpu_hours, gpu_usd, llm_usd, usd} of one trial."""
    hours = trial_gpu_hours(t, now)
    gpu_usd = hours * (pricing or Pricing()).per_hour(t.gpu_type)
    return {
        "gpu_hours": round(hours, 6),
        "gpu_usd": round(gpu_usd, 6),
        "llm_usd": round(t.llm_usd, 6),
        "usd": round(gpu_usd + t.llm_usd, 6),
    }


def study_cost(state: StudyState, now: float | None = None) -> dict[str, Any]:
    """The study's totals and the dollars per kept improvement (None before one is kept)."""
    now = now or time.time()
    pricing = Pricing()
    hours = gpu_usd = 0.0
    for t in state.trials.values():
        c = trial_cost(t, now, pricing)
        hours += c["gpu_hours"]
        gpu_usd += c["gpu_usd"]
    total = gpu_usd + state.llm_usd  # every LLM call counts, failed ones too
    keeps = sum(1 for t in state.trials.values() if t.decision == "keep")
    return {
        "gpu_hours": round(hours, 6),
        "gpu_usd": round(gpu_usd, 4),
        "llm_usd": round(state.llm_usd, 4),
        "usd": round(total, 4),
        "kept_improvements": keeps,
        "usd_per_improvement": round(total / keeps, 4) if keeps else None,
        "price_source": pricing.source,
    }


def study_throughput(
    state: StudyState, wall_s: float, slot_gpus: int, now: float | None = None
) -> dict[str, Any]:
    """Trials per GPU-hour of the study's GPUs, and the fraction of that GPU time its trials
    ran (SkyPilot's parallel autoresearch: ~7.1 per GPU-hour against an ideal 12 for 5-minute
    runs). The study's GPU time is its wall time times ``slot_gpus`` (concurrency times GPUs
    per trial: what it may hold at once); a trial counts once its job has ended. None where
    there is no GPU time yet (a CPU study, or no wall time)."""
    done = sum(1 for t in state.trials.values() if t.job_done and t.gpu_s > 0)
    study_hours = max(0.0, wall_s) / 3600.0 * max(0, slot_gpus)
    if study_hours <= 0:
        return {"trials_per_gpu_hour": None, "gpu_busy": None}
    busy = state.gpu_hours(now) / study_hours
    return {
        "trials_per_gpu_hour": round(done / study_hours, 3),
        "gpu_busy": round(min(1.0, busy), 3),
    }


def trial_gpus(gpus_per_trial: int | None, state: StudyState) -> int:
    """GPUs per trial: the study's key, or (unset: 1 on a pool with GPUs, else 0) what its
    trials held."""
    if gpus_per_trial is not None:
        return gpus_per_trial
    return max((t.gpus for t in state.trials.values()), default=0)
