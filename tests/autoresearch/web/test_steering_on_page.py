"""Issue 39.5 and 39.9 on the study page: its view (the /api/studies/NAME reply) carries every
``steer`` journal event in words (who steered and what) and the one meaning of best: the kept
``best`` and, where another trial's single value is lower, ``lowest_seen`` with why it was not
kept, as autoresearch/journal/best.py says (the function get_study and the report use)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_study import write_journal
from web_helpers import http, serving

pytestmark = pytest.mark.slow


def test_the_view_names_each_steering_and_best_apart_from_lowest_seen(tmp_path: Path) -> None:
    from autoresearch.api import load_state, steer_study
    from autoresearch.journal.best import lowest_seen

    folder = write_journal(tmp_path / "studies" / "s", 40, name="steered", seed=0)
    # no loop runs: steer_study journals each request itself (a resume replays them)
    steer_study(folder, note="try a smaller lr", by="alice", admin=True)
    steer_study(folder, enqueue=[{"diff": {"lr": 0.01}}], pin={"depth": 4}, budget={"trials": 40})
    study, state = load_state(folder)
    steered = [json.loads(x) for x in (folder / "journal.jsonl").read_text().splitlines()]
    assert sum(1 for e in steered if e.get("event") == "steer") == 2

    with serving(tmp_path / "studies") as base:
        status, _, raw = http(base + "/api/studies/steered")
        assert status == 200
        view = json.loads(raw)
    requests = view["steering"]["requests"]
    assert requests == [state.steering.line(e) for e in state.steering.log]
    assert "alice" in requests[0] and "try a smaller lr" in requests[0]
    assert "queued 1 trial(s)" in requests[1] and "depth=4" in requests[1]
    assert "trials=40" in requests[1]
    assert view["steering"]["pins"] == {"depth": 4} and view["steering"]["queued"] == 1

    # best: the kept best; lowest_seen: another trial's lower single value, and why
    low = lowest_seen(state.ordered(), state.best_trial, study.objective.direction)
    assert view["best"]["trial"] == state.best_trial
    assert low is not None and low["trial"] != state.best_trial  # the synthetic study has one
    assert view["lowest_seen"] == json.loads(json.dumps(low))
    assert view["lowest_seen"]["value"] < view["best"]["value"]  # lower, yet not the best
    assert view["lowest_seen"]["why_not_kept"].startswith("within the noise floor")
