"""The Client-level pieces of issue 18: metric scores, ranking, at_step, log search."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from air_skills.errors import InvalidInput
from air_skills.runtime.results.log_search import BadPattern, search_log
from air_skills.tracking.compare import (
    NOT_SET,
    check_order,
    config_diff,
    rank,
    score,
    value_at,
)

CURVE = [(0, 3.0), (100, 2.5), (200, 2.1), (300, 2.2)]


def test_value_at_a_step_is_the_one_at_or_just_before_it() -> None:
    assert value_at(CURVE, 200) == (200, 2.1)
    assert value_at(CURVE, 250) == (200, 2.1)
    assert value_at(CURVE, 10_000) == (300, 2.2)
    assert value_at([(50, 1.0)], 10) is None


def test_score_gives_latest_best_and_their_steps() -> None:
    got = score(CURVE, "minimize", at_step=150)
    assert got == {
        "latest": 2.2,
        "step": 300,
        "best": 2.1,
        "best_step": 200,
        "at_step": {"step": 100, "value": 2.5},
    }
    assert score(CURVE, "maximize")["best"] == 3.0
    assert score([], "minimize") == {}


def test_a_key_one_config_lacks_reads_not_set() -> None:
    assert config_diff({"lr": 0.1, "depth": 2}, {"lr": 0.2}) == {"depth": NOT_SET, "lr": 0.2}
    assert config_diff({"lr": 0.1}, {"lr": 0.1}) == {}


def test_rank_puts_the_best_first_and_unscored_last() -> None:
    items = [SimpleNamespace(job_id=j) for j in ("a", "b", "c", "d")]
    scores = {"a": {"best": 2.0}, "b": {"best": 1.5}, "d": {"best": 3.0}}
    assert [i.job_id for i in rank(items, scores, "best", "minimize")] == ["b", "a", "d", "c"]
    assert [i.job_id for i in rank(items, scores, "best", "maximize")] == ["d", "a", "b", "c"]
    with pytest.raises(InvalidInput):
        check_order("best", None)
    with pytest.raises(InvalidInput):
        check_order("worst", "val_loss")


def test_search_log_gives_line_numbers_and_byte_offsets(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    lines = [f"step {i} loss {3 - i / 1000:.4f}" for i in range(20_000)]
    lines[12_345] = "val_loss: 1.668"
    lines[19_000] = "val_loss: 1.650"
    log.write_text("\n".join(lines) + "\n")
    first = search_log(log, r"val_loss: [0-9.]+")
    assert first.total == 2 and [m.line for m in first.matches] == [12_346, 19_001]
    data = log.read_bytes()
    assert data[first.matches[0].offset :].startswith(b"val_loss: 1.668")
    last = search_log(log, "val_loss", last_match=True, max_matches=1)
    assert [m.text for m in last.matches] == ["val_loss: 1.650"] and last.total == 2
    capped = search_log(log, "^step", max_matches=5)
    assert len(capped.matches) == 5 and capped.total == 19_998
    with pytest.raises(BadPattern):
        search_log(log, "val_loss(")
    assert search_log(tmp_path / "missing.log", "x").total == 0
