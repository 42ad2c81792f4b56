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
    assert items[1]["name"] == "base lr=0.1 depth=3 seed=1"
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
    assert groups[0]["n"] == 1 and groups[0]["values"] == [1.0, None]
    assert groups[1]["mean"] is None and "no value yet" in group_line(groups[1])
    by_lr = seed_groups(jobs[:2], {"a0": 1.0, "a1": 2.0}, seed_key="lr")
    assert len(by_lr) == 2  # grouped over lr, the seeds tell them apart
