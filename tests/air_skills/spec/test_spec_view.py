"""models/spec_view.py, the pydantic-free check `air launch` uses from a shell, against
JobSpec: its tables are JobSpec's schema, and whatever it takes JobSpec takes, dumped the same
(so the launch queues the same record); whatever JobSpec refuses, it leaves to JobSpec."""

from __future__ import annotations

from typing import Any

import pytest

from air_skills.errors import InvalidSpec
from air_skills.models import JobSpec
from air_skills.models.spec_view import (
    BOOLS,
    CHOICES,
    DEFAULTS,
    FLOATS,
    INTS,
    PATTERNS,
    TEXTS,
    quick_spec,
)


def _options(prop: dict[str, Any]) -> dict[str, Any]:
    """A property's schema without its ``null`` branch."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    assert len(branches) == 1, prop
    return branches[0]


def test_the_tables_are_jobspecs_schema() -> None:
    props = JobSpec.model_json_schema()["properties"]
    assert list(DEFAULTS) == list(props)  # every field, in JobSpec's order
    dumped = JobSpec.parse({"command": ["x"]}).model_dump(mode="json")
    assert dumped == {**DEFAULTS, "command": ["x"]}
    for key, (low, high) in INTS.items():
        one = _options(props[key])
        assert (one["type"], one["minimum"], one["maximum"]) == ("integer", low, high), key
    for key, (low, exclusive, high) in FLOATS.items():
        one = _options(props[key])
        assert one["type"] == "number", key
        assert one.get("exclusiveMinimum" if exclusive else "minimum") == low, key
        assert one.get("maximum") == high, key
    for key, (shortest, longest) in TEXTS.items():
        one = _options(props[key])
        assert one["type"] == "string" and "pattern" not in one, key
        assert (one.get("minLength", 0), one.get("maxLength")) == (shortest, longest), key
    for key, pattern in PATTERNS.items():
        assert _options(props[key])["pattern"] == pattern, key
    for key, choices in CHOICES.items():
        assert tuple(_options(props[key])["enum"]) == choices, key
    for key in BOOLS:
        assert _options(props[key])["type"] == "boolean", key


GOOD: list[dict[str, Any]] = [
    {"command": ["true"]},
    {"command": "python train.py --lr 0.1"},
    {"command": ["python", "t.py"], "name": "n" * 200, "gpus": 1024, "priority": "high"},
    {"command": ["x"], "timeout_min": 5, "stall_timeout_min": 0, "disk_gb": 0.5},
    {"command": ["x"], "stall_timeout_min": 10080, "max_retries": 100, "cpus": 1},
    {"command": ["x"], "config": {"lr": 0.1, "layers": [1, 2], "opt": {"b": None}}},
    {"command": ["x"], "env": {"A": "1"}, "tags": {"t": "v"}, "project": "p.q-1"},
    {"command": ["x"], "code": "live", "sandbox": "off", "network": False, "writable": ["/d"]},
    {"command": ["x"], "patch": "--- a\n", "image": "localhost/train:1", "backend": "slurm"},
    {"command": ["x"], "image_digest": "sha256:" + "a" * 64, "on_stall": "notify"},
    {"command": ["x"], "idempotency_key": "k", "allow_duplicate": True, "config_as": "file"},
    {"command": ["x"], "experiment": "e" * 500, "check_command": False, "procs": 1, "nodes": 1},
]
# JobSpec refuses each of these: the view must leave them to it
BAD: list[dict[str, Any]] = [
    {"command": []},
    {"command": [" "]},
    {"command": ["a\x00b"]},
    {"command": "'unclosed"},
    {"command": ["x"], "gpus": -1},
    {"command": ["x"], "gpus": 1025},
    {"command": ["x"], "name": "n" * 201},
    {"command": ["x"], "name": "\x1b[31mred"},
    {"command": ["x"], "priority": "urgent"},
    {"command": ["x"], "timeout_min": 0},
    {"command": ["x"], "stall_timeout_min": 10081},
    {"command": ["x"], "max_retries": 101},
    {"command": ["x"], "project": "bad name"},
    {"command": ["x"], "project": "abc\n"},
    {"command": ["x"], "image": "-bad"},
    {"command": ["x"], "idempotency_key": ""},
    {"command": ["x"], "env": {"A=B": "1"}},
    {"command": ["x"], "config": {"x": float("nan")}},
    {"command": ["x"], "code": "live", "patch": "--- a\n"},
    {"command": ["x"], "nodes": 2},
    {"command": ["x"], "procs": "gpu"},
    {"command": ["x"], "unknown": 1},
    {"name": "no command"},
]
# JobSpec takes (or coerces) these; the view is not sure and leaves them to it
UNSURE: list[dict[str, Any]] = [
    {"command": ["x"], "gpus": "2"},
    {"command": ["x"], "gpus": True},
    {"command": ["x"], "timeout_min": "5"},
    {"command": ["x"], "data": [{"name": "d", "path": "/tmp"}]},
    {"command": ["x"], "procs": 2, "gpus": 2},
    {"command": ["x"], "config": {1: "a"}},
    {"command": ["x"], "timeout_min": float("inf")},
]


@pytest.mark.parametrize("data", GOOD)
def test_what_the_view_takes_jobspec_takes_and_dumps_the_same(data: dict[str, Any]) -> None:
    view = quick_spec(data)
    assert view is not None, data
    spec = JobSpec.parse(data)
    assert view.model_dump() == spec.model_dump(mode="json")
    assert list(view.model_dump()) == list(spec.model_dump(mode="json"))
    assert view.model_fields_set == spec.model_fields_set
    assert view.resolved_project() == spec.resolved_project()
    assert view.procs_per_node() == spec.procs_per_node()
    update = {"workdir": "/w", "tags": {"a": "b"}}
    assert view.model_copy(update=update).model_dump() == spec.model_copy(update=update).model_dump(
        mode="json"
    )
    assert view.model_copy(update=update).model_fields_set == (
        spec.model_copy(update=update).model_fields_set
    )


@pytest.mark.parametrize("data", BAD)
def test_what_jobspec_refuses_the_view_leaves_to_it(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidSpec):
        JobSpec.parse(data)
    assert quick_spec(data) is None


@pytest.mark.parametrize("data", UNSURE)
def test_what_the_view_is_not_sure_of_goes_to_jobspec(data: dict[str, Any]) -> None:
    assert quick_spec(data) is None
