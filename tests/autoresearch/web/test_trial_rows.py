"""The trial table's rows kept between journal changes (``web/rows.TrialRows``), and their JSON,
are the rows made afresh: after a trial's decision, for a running trial as the clock moves, and
after the GPU price changes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_study import write_journal

from autoresearch.journal.tail import JournalTail
from autoresearch.report.cost import Pricing
from autoresearch.web.rows import TrialRows, trial_row

MLFLOW = "http://127.0.0.1:5000"


def fresh(tail: JournalTail, now: float, pricing: Pricing) -> list[dict]:
    state = tail.read()
    return [trial_row(t, now, MLFLOW, state.experiment_id, pricing) for t in state.ordered()]


def kept(table: TrialRows, tail: JournalTail, now: float, pricing: Pricing) -> list[dict]:
    state = tail.read()
    rows = table.rows(state.ordered(), now, MLFLOW, state.experiment_id, pricing)
    # the JSON kept with the rows is theirs, byte for byte (the view splices it in)
    assert table.json() == json.dumps(rows, default=str, separators=(",", ":")).encode()
    return rows


def append(folder: Path, *events: dict) -> None:
    with open(folder / "journal.jsonl", "a") as f:
        for e in events:
            f.write(json.dumps({"ts": time.time(), **e}) + "\n")


def test_kept_rows_are_the_rows_made_afresh(tmp_path: Path, monkeypatch) -> None:
    folder = write_journal(tmp_path / "s", 30, stopped=False)
    tail, table, pricing = JournalTail(folder), TrialRows(), Pricing()
    now = time.time()
    first = kept(table, tail, now, pricing)
    assert first == fresh(tail, now, pricing)
    append(folder,
           {"event": "proposal", "trial": 30, "source": "llm", "diff": {"lr": 0.01},
            "config": {"lr": 0.01, "depth": 2}},
           {"event": "launched", "trial": 30, "job_id": "j30", "attempt": 1, "gpus": 1,
            "gpu_type": "NVIDIA H100 80GB HBM3"},
           {"event": "job_started", "trial": 30, "started_at": now - 100})  # fmt: skip
    rows = kept(table, tail, now, pricing)
    assert rows == fresh(tail, now, pricing) and rows[:29] == first[:29]
    # trial 30 joined trial 29's LLM round (no call between them): 29's share halved
    assert rows[29]["llm_usd"] == first[29]["llm_usd"] / 2
    later = now + 3600  # the running trial's duration and cost move with the clock
    rows = kept(table, tail, later, pricing)
    assert rows == fresh(tail, later, pricing) and rows[30]["duration_s"] > 3600
    append(folder,
           {"event": "finished", "trial": 30, "status": "SUCCEEDED", "value": 1.0,
            "ended_at": later, "gpu_s": 3700.0},
           {"event": "decision", "trial": 30, "decision": "keep", "value": 1.0,
            "best_value": 1.0})  # fmt: skip
    rows = kept(table, tail, later, pricing)
    assert rows == fresh(tail, later, pricing) and rows[30]["decision"] == "keep"
    monkeypatch.setenv("AIR_GPU_PRICE_USD_PER_HOUR", "100")  # another price: every row again
    dear = Pricing()
    rows = kept(table, tail, later, dear)
    assert rows == fresh(tail, later, dear) and rows[30]["usd"] > first[5]["usd"]
