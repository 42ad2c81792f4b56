"""The study file: strict validation with every problem at once, defaults, bare words."""

from __future__ import annotations

from pathlib import Path

import pytest
from ar_helpers import small_study

from air_skills.errors import InvalidSpec, NotFound
from autoresearch.study.study import check_runnable, load_study, parse_study


def problems_of(data: dict) -> list[str]:
    with pytest.raises(InvalidSpec) as info:
        parse_study(data)
    assert info.value.code == "invalid-spec"
    assert info.value.hint
    return info.value.problems


def test_minimal_study_gets_defaults() -> None:
    s = parse_study(
        {
            "name": "m",
            "command": "python train.py --fast",
            "search_space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
            "objective": {"metric": "val_loss"},
        }
    )
    assert s.command == ["python", "train.py", "--fast"]
    assert s.proposer.type == "tpe"
    assert s.budget.trials > 0 and s.budget.concurrency >= 1
    assert s.objective.direction == "minimize"
    assert s.early_stopping.type == "median"
    assert s.noise.repeats == 0
    assert s.workdir == "."


def test_bare_words_for_proposer_and_early_stopping() -> None:
    s = parse_study(small_study(proposer="tpe", early_stopping="none"))
    assert s.proposer.type == "tpe" and s.early_stopping.type == "none"
    s = parse_study(small_study(proposer="llm"))
    assert s.proposer.provider == "anthropic" and s.proposer.resolved_model


def test_unknown_keys_are_refused_everywhere() -> None:
    data = small_study(colour="blue", budget={"trails": 3})
    data["search_space"]["x"]["step"] = 0.1
    found = problems_of(data)
    assert "colour: unknown key" in found
    assert "budget.trails: unknown key" in found
    assert "search_space.x.step: unknown key" in found


def test_empty_search_space() -> None:
    found = problems_of(small_study(search_space={}))
    assert any(p.startswith("search_space:") and "empty" in p for p in found)


def test_low_above_high_and_log_needs_positive_low() -> None:
    data = small_study(
        search_space={
            "lr": {"type": "float", "low": 0.1, "high": 0.01},
            "n": {"type": "int", "low": 8, "high": 2},
            "wd": {"type": "float", "low": 0.0, "high": 1.0, "log": True},
        }
    )
    found = problems_of(data)
    assert "search_space.lr: low (0.1) must be below high (0.01)" in found
    assert "search_space.n: low (8) must be below high (2)" in found
    assert "search_space.wd: log scale needs low > 0 (got 0.0)" in found


def test_every_problem_reported_at_once() -> None:
    data = {
        "name": "bad name!",
        "command": [],
        "search_space": {
            "a": {"type": "float", "low": 2.0, "high": 1.0},
            "b": {"low": 1},
            "c": {"type": "choice", "values": []},
            "d": {"type": "bogus"},
        },
        "objective": {"metric": "loss", "direction": "up"},
        "budget": {"trials": 0, "concurrency": "two"},
        "proposer": {"type": "llm", "provider": "mistral"},
        "extra": True,
    }
    found = problems_of(data)
    wanted = [
        "name:",
        "command:",
        "search_space.a:",
        "search_space.b: missing 'type'",
        "search_space.c.values:",
        "search_space.d: unknown type 'bogus'",
        "objective.direction:",
        "budget.trials:",
        "budget.concurrency:",
        "proposer.provider:",
        "extra: unknown key",
    ]
    for prefix in wanted:
        assert any(p.startswith(prefix) for p in found), (prefix, found)


def test_missing_required_keys() -> None:
    found = problems_of({"name": "x"})
    for key in ("command", "search_space", "objective"):
        assert f"{key}: required key is missing" in found


def test_types_are_strict() -> None:
    found = problems_of(small_study(budget={"trials": "10"}, gpus_per_trial=True))
    assert any(p.startswith("budget.trials:") for p in found)
    assert any(p.startswith("gpus_per_trial:") for p in found)


def test_base_config_outside_the_space() -> None:
    found = problems_of(small_study(base_config={"x": 5.0, "y": "a"}))
    assert "base_config.x: x=5.0 is out of range [-1.0, 1.0]" in found
    assert any(p.startswith("base_config.y:") and "wrong type" in p for p in found)


def test_unknown_bare_proposer() -> None:
    found = problems_of(small_study(proposer="bayes"))
    assert any("unknown proposer 'bayes'" in p for p in found)


def test_yaml_file_with_short_exponents(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: y\ncommand: [python, t.py]\n"
        "search_space:\n  lr: {type: float, low: 1e-4, high: 1e-2, log: true}\n"
        "objective: {metric: loss}\nproposer: random\n"
    )
    s = load_study(path)
    assert s.search_space["lr"].low == pytest.approx(1e-4)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: y\ncommand: [python, t.py\n")
    with pytest.raises(InvalidSpec) as info:
        load_study(path)
    assert "line" in info.value.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        load_study(tmp_path / "nope.yaml")


def test_check_runnable_finds_a_missing_script(tmp_path: Path) -> None:
    s = parse_study(small_study(command=["python", "nope.py"], workdir=str(tmp_path)))
    with pytest.raises(InvalidSpec) as info:
        check_runnable(s)
    assert "nope.py" in info.value.problems[0]
    (tmp_path / "nope.py").write_text("")
    assert check_runnable(s).workdir == str(tmp_path.resolve())


def test_backend_project_and_data_keys(tmp_path: Path) -> None:
    from autoresearch.study.study import Study

    base = {
        "name": "s",
        "command": ["python", "t.py"],
        "search_space": {"lr": {"type": "float", "low": 0.1, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
    }
    study = Study.model_validate(
        {**base, "backend": "ray", "project": "vision", "data": [{"name": "d", "path": "/x"}]}
    )
    assert study.backend == "ray" and study.project == "vision" and study.data[0].name == "d"
    with pytest.raises(ValueError):
        Study.model_validate({**base, "backend": "kubernetes"})
