"""Many jobs in one call and seed groups: the pure functions of air_skills.batch."""

from __future__ import annotations

import math

import pytest

from air_skills.batch import expand, group_line, keyed, seed_groups
from air_skills.errors import InvalidInput


def test_expand_makes_one_job_per_grid_point_and_seed() -> None:
    spec = {"command": ["python", "t.py"], "name": "base", "config": {"lr": 1.0, "depth": 2}}
    items = expand(spec, seeds=[0, 1], grid={"lr": [0.1, 0.2], "depth": [3]})
    assert [i["config"] for i in items] == [
        {"lr": 0.1, "depth": 3, "seed": 0},
        {"lr": 0.1, "depth": 3, "seed": 1},
        {"lr": 0.2, "depth": 3, "seed": 0},
        {"lr": 0.2, "depth": 3, "seed": 1},
    ]
    assert items[1]["name"] == "base lr=0.1 seed=1"  # what tells the items apart
    assert spec["config"] == {"lr": 1.0, "depth": 2}  # the given spec is left alone
    assert expand(spec, seeds=[7], seed_key="rng")[0]["config"]["rng"] == 7
    assert expand(spec) == [spec]


def test_expand_refuses_empty_grids_and_too_many_jobs() -> None:
    with pytest.raises(InvalidInput, match="no values: lr"):
        expand({"command": ["x"]}, grid={"lr": []})
    with pytest.raises(InvalidInput, match="at most 100"):
        expand({"command": ["x"]}, seeds=list(range(11)), grid={"a": list(range(10))})
    with pytest.raises(InvalidInput, match="both a grid key and the seed key"):
        expand({"command": ["x"]}, seeds=[1], grid={"seed": [1, 2]})


def test_each_item_gets_its_own_idempotency_key() -> None:
    items = keyed([{"command": ["a"]}, {"command": ["b"], "idempotency_key": "mine"}], "round-3")
    assert [i["idempotency_key"] for i in items] == ["round-3#0", "mine"]
    assert keyed([{"command": ["a"]}], None) == [{"command": ["a"]}]


def _job(job_id: str, lr: float, seed: int, digest: str = "d1") -> tuple[str, dict, str]:
    return job_id, {"command": ["t"], "name": job_id, "config": {"lr": lr, "seed": seed}}, digest


def test_seed_groups_give_n_mean_std_best_mean_first() -> None:
    jobs = [_job("a0", 0.1, 0), _job("a1", 0.1, 1), _job("b0", 0.2, 0), _job("b1", 0.2, 1)]
    values = {"a0": 3.0, "a1": 5.0, "b0": 1.0, "b1": 2.0}
    low, high = seed_groups(jobs, values)
    assert low["members"] == ["b0", "b1"] and low["config"] == {"lr": 0.2}
    assert (low["n"], low["mean"]) == (2, 1.5) and math.isclose(low["std"], 0.7071, rel_tol=1e-3)
    assert high["mean"] == 4.0
    best_first = seed_groups(jobs, values, direction="maximize")
    assert best_first[0]["members"] == ["a0", "a1"]
    assert "1.5 ± 0.71, mean of 2 run(s)" in group_line(low)


def test_other_code_or_seed_key_makes_another_group_and_non_finite_values_do_not_count() -> None:
    jobs = [_job("a0", 0.1, 0), _job("a1", 0.1, 1), _job("c0", 0.1, 0, digest="d2")]
    groups = seed_groups(jobs, {"a0": 1.0, "a1": math.inf, "c0": math.nan})
    assert [g["members"] for g in groups] == [["a0", "a1"], ["c0"]]
    assert groups[0]["n"] == 1 and groups[0]["values"] == [1.0, "inf"]
    assert groups[0]["diverged"] == 1 and "(1 of 2 diverged)" in group_line(groups[0])
    assert groups[1]["mean"] is None and "no value: 1 of 1 diverged" in group_line(groups[1])
    by_lr = seed_groups(jobs[:2], {"a0": 1.0, "a1": 2.0}, seed_key="lr")
    assert len(by_lr) == 2  # grouped over lr, the seeds tell them apart


MAX = 1.7976931348623157e308


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, MAX, -MAX])
def test_seed_groups_never_raise_and_count_diverged_runs(bad: float) -> None:
    """39.1: one diverged seed (inf, nan, MLflow's float-max clamp) made fmean raise."""
    jobs = [_job("a0", 0.1, 0), _job("a1", 0.1, 1), _job("a2", 0.1, 2)]
    (group,) = seed_groups(jobs, {"a0": 0.5, "a1": bad, "a2": 0.7})
    assert group["n"] == 2 and group["diverged"] == 1 and math.isclose(group["mean"], 0.6)
    line = group_line(group)
    assert "1 of 3 diverged" in line and "e+308" not in line


def test_seed_groups_of_huge_finite_values_do_not_overflow() -> None:
    jobs = [_job("a0", 0.1, 0), _job("a1", 0.1, 1)]
    (group,) = seed_groups(jobs, {"a0": 1.79e308, "a1": 1.79e308})
    assert group["n"] == 2 and math.isclose(group["mean"], 1.79e308)


def test_groups_of_failed_jobs_say_so_and_defaults_read_default() -> None:
    jobs = [_job("a0", 0.1, 0), _job("a1", 0.1, 1)]
    jobs.append(("b0", {"command": ["t"], "config": {"seed": 0}}, "d1"))
    groups = seed_groups(jobs, {"b0": 0.3}, statuses={"a0": "FAILED", "a1": "FAILED"})
    assert groups[0]["config"] == {"lr": "default"}
    assert group_line(groups[0]).startswith("lr=default: 0.3")
    assert "no value: 2 of 2 ended without a value" in group_line(groups[1])


def test_variants_cross_seeds_labelled_by_what_differs() -> None:
    """39.3: a base, variants (config and/or patch) x seeds in one expansion."""
    base = {"command": ["python", "t.py"], "config": {"lr": 0.01}, "patch": "P0"}
    variants = [{"config": {}}, {"config": {"lr": 0.003}}, {"config": {"wd": 0.1}, "patch": "P1"}]
    items = expand(base, seeds=[0, 1, 2], variants=variants)
    assert len(items) == 9
    assert [i["name"] for i in items[:4]] == [
        "lr=0.01 wd=default patch=base seed=0",
        "lr=0.01 wd=default patch=base seed=1",
        "lr=0.01 wd=default patch=base seed=2",
        "lr=0.003 wd=default patch=base seed=0",
    ]
    assert items[8]["name"] == "lr=0.01 wd=0.1 patch=2 seed=2"
    assert items[8]["config"] == {"lr": 0.01, "wd": 0.1, "seed": 2} and items[8]["patch"] == "P1"
    assert items[0]["patch"] == "P0"
    named = expand(base, seeds=[1], variants=[{"name": "wide", "config": {"w": 2}}, {}])
    assert [i["name"] for i in named] == ["wide w=2", "w=default"]
    with pytest.raises(InvalidInput, match="variant"):
        expand(base, variants=[{}, 3])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="1000 per call"):
        expand(base, seeds=list(range(11)), variants=[{}] * 100, limit=1000)


def test_a_key_repeated_over_items_becomes_key_n() -> None:
    """39.2: an idempotency_key inside the spec that seeds repeat is made per item."""
    items = expand({"command": ["t"], "idempotency_key": "round-3"}, seeds=[0, 1, 2])
    assert [i["idempotency_key"] for i in items] == ["round-3#0", "round-3#1", "round-3#2"]
