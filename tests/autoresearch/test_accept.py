"""The acceptance rules (loop/selection/accept.py) and the final selection's pure parts
(loop/selection/final.py): tables of cases, no processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from ar_helpers import small_study

from autoresearch.journal.journal import StudyState
from autoresearch.loop import decisions
from autoresearch.loop.selection import accept, final
from autoresearch.loop.selection.final_phase import _count_reuse
from autoresearch.study.study import parse_study


@pytest.mark.parametrize(
    ("text", "kind", "param"),
    [("noise-floor", "noise-floor", None), ("k-sigma(2.5)", "k-sigma", 2.5),
     ("paired-test(0.05)", "paired-test", 0.05), (None, "noise-floor", None)],
)  # fmt: skip
def test_parse(text: str | None, kind: str, param: float | None) -> None:
    rule = accept.parse(text)
    assert (rule.kind, rule.param) == (kind, param)
    assert str(rule) == (text or "noise-floor")


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        # best 1.0, std 0.1, floor 0.2 (2 sigmas); minimise
        ("noise-floor", 0.79, True), ("noise-floor", 0.81, False),
        ("k-sigma(1)", 0.89, True), ("k-sigma(1)", 0.91, False),
        ("k-sigma(3)", 0.69, True), ("k-sigma(3)", 0.71, False),
        # z(0.05) = 1.645, x sqrt(2) x 0.1 = 0.2326
        ("paired-test(0.05)", 0.76, True), ("paired-test(0.05)", 0.78, False),
        ("k-sigma(1)", 1.5, False),  # worse is never kept
    ],
)  # fmt: skip
def test_beats(rule: str, value: float, expected: bool) -> None:
    r = accept.parse(rule)
    assert accept.beats(r, value, 1.0, 0.1, 0.2, "minimize") is expected
    assert decisions.judge(value, 1.0, 0.2, "minimize", r, 0.1) == (
        "keep" if expected else "discard"
    )
    mirrored = accept.beats(r, 2.0 - value, 1.0, 0.1, 0.2, "maximize")
    assert mirrored is expected


def test_paired_t_test() -> None:
    r = accept.parse("paired-test(0.05)")
    base = [1.0, 1.2, 0.9, 1.1]
    steady = [b - 0.05 for b in base]  # a small, steady gain: the pairs agree
    assert accept.beats_paired(r, steady, base, 0.15, 0.3, "minimize")
    # noise-floor needs the mean 0.3 lower: the same runs are not enough
    assert not accept.beats_paired(accept.parse("noise-floor"), steady, base, 0.15, 0.3, "minimize")
    mixed = [0.8, 1.4, 0.7, 1.3]  # the same mean gain, pairs disagreeing
    assert not accept.beats_paired(r, mixed, base, 0.15, 0.3, "minimize")
    assert accept._t(0.05, 4) == pytest.approx(2.132, abs=0.02)


def _state(values: dict[int, float], best: int, floor: float) -> StudyState:
    """A finished study: trial 0 the baseline, the others judged (best kept)."""
    st = StudyState()
    ts = 0.0
    for n, v in values.items():
        ts += 1
        source = "baseline" if n == 0 else "tpe"
        config = {"x": n / 10, "y": 0.0, "seed": 0}
        for ev in (
            {"event": "proposal", "trial": n, "source": source, "diff": {"x": n / 10} if n else {},
             "config": config},
            {"event": "launched", "trial": n, "job_id": f"j{n}"},
            {"event": "finished", "trial": n, "status": "SUCCEEDED", "value": v},
        ):  # fmt: skip
            st.apply({**ev, "ts": ts})
    st.apply({"event": "noise_floor", "values": [values[0]], "std": floor / 2, "floor": floor})
    for n in values:
        d = "baseline" if n == 0 else ("keep" if n == best else "discard")
        st.apply({"event": "decision", "trial": n, "decision": d, "value": values[n],
                  "best_value": values[n], "ts": 99.0})  # fmt: skip
    return st


def test_finalists_are_the_top_k_within_the_floor() -> None:
    study = parse_study(small_study(base_config={"x": 0.0, "y": 0.0, "seed": 0},
                                    final={"top_k": 3, "seeds": 2}))  # fmt: skip
    # 3 kept at 0.50; 5 lowest (0.40) and 2, 4 within 0.2 of it; 6 beyond
    st = _state({0: 1.0, 1: 0.7, 2: 0.55, 3: 0.50, 4: 0.45, 5: 0.40, 6: 0.65}, best=3, floor=0.2)
    assert final.finalists(study, st) == [3, 5, 4]  # the kept best first, then by rank
    st2 = _state({0: 1.0, 1: 0.7, 2: 0.55, 3: 0.50, 4: 0.45, 5: 0.40}, best=3, floor=0.02)
    assert final.finalists(study, st2) == [3, 5]  # only 5 is within the floor of 0.40
    seeds = final.seeds(study)
    assert seeds == [1000, 1001]
    runs = final.plan(study, st, [3, 5, 4], seeds)
    assert [(r["final_of"], r["config"]["seed"]) for r in runs] == [
        (n, s) for n in (0, 3, 5, 4) for s in seeds
    ]
    assert all(r["config"]["x"] == st.trials[r["final_of"]].config["x"] for r in runs)


def test_gap_words() -> None:
    study = parse_study(small_study(objective={"metric": "loss", "holdout": "test_loss"}))
    stats = lambda m, s=0.01, n=3: {"mean": m, "std": s, "n": n}  # noqa: E731
    base = {"val": stats(1.0), "search": stats(1.0), "holdout": stats(1.0)}
    win = {"val": stats(0.877), "search": stats(0.85), "holdout": stats(0.902)}
    g = final.gap(study, base, win)
    assert g["verdict"] == "val -12.3%, held-out -9.8%: gap 2.5 points"
    assert g["holdout_gain"] is True
    same = {"val": stats(0.877), "search": stats(0.85), "holdout": stats(0.995, 0.05)}
    g = final.gap(study, {**base, "holdout": stats(1.0, 0.05)}, same)
    assert g["holdout_gain"] is False and g["verdict"].endswith("; no held-out gain")


def test_a_holdout_raises_the_noise_repeats_with_a_note() -> None:
    study = parse_study(small_study(objective={"metric": "loss", "holdout": "test_loss"}))
    assert study.noise.repeats == 2 and study.final_runs is not None
    assert study.notes and "noise.repeats raised from 0 to 2" in study.notes[0]
    off = parse_study(small_study(objective={"metric": "loss", "holdout": "test_loss"},
                                  final=False))  # fmt: skip
    assert off.final_runs is None
    assert parse_study(small_study()).final_runs is None  # no holdout: off unless asked


def test_held_out_reuse_is_counted_per_split(tmp_path: Path) -> None:
    study = parse_study(small_study(objective={"metric": "loss", "holdout": "test_loss"}))
    assert [_count_reuse(tmp_path, study, s) for s in ("a", "b", "a", "c")] == [1, 2, 2, 3]
    other = parse_study(small_study(objective={"metric": "loss", "holdout": "other_loss"}))
    assert _count_reuse(tmp_path, other, "a") == 1  # another split


def test_no_proposer_request_holds_a_final_run() -> None:
    """suggest_trials after the search, too: a final run carries the held-out metric."""
    from autoresearch.loop.trials import build_request

    study = parse_study(small_study(base_config={"x": 0.0, "y": 0.0, "seed": 0}))
    st = _state({0: 1.0, 1: 0.7}, best=1, floor=0.1)
    st.apply({"event": "proposal", "trial": 2, "source": "final", "final_of": 1,
              "config": {"x": 0.1, "y": 0.0, "seed": 1000}, "ts": 100.0})  # fmt: skip
    request = build_request(study, st, 1)
    assert [t.number for t in request.trials] == [0, 1]


def test_a_missing_held_out_input_is_refused_at_start() -> None:
    """Read only when the search ends: a typo must fail now, not after the whole search."""
    from air_skills.errors import InvalidSpec
    from autoresearch.study.study import check_runnable

    holdout = {"metric": "test_loss", "command": "python no_such_eval.py",
               "data": [{"name": "held", "path": "/no/such/held-out"}]}  # fmt: skip
    with pytest.raises(InvalidSpec) as err:
        check_runnable(parse_study(small_study(objective={"metric": "loss", "holdout": holdout})))
    text = str(err.value)
    assert "objective.holdout.command" in text and "objective.holdout.data.held" in text
