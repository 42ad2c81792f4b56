"""The public API is small and deliberate: a changed surface is a visible diff."""

from __future__ import annotations

import subprocess
import sys

import air_skills


def test_public_names_are_locked() -> None:
    assert sorted(air_skills.__all__) == sorted(air_skills._EXPORTS) + ["__version__"]
    for name in air_skills.__all__:
        assert getattr(air_skills, name) is not None
    assert set(air_skills.__all__) == {
        "AirError",
        "Client",
        "GpuInfo",
        "JobInfo",
        "JobSpec",
        "JobStatus",
        "LogChunk",
        "Metrics",
        "Page",
        "__version__",
    }


# DESIGN.md's contract: each Client method with the parameters agents and scripts call by name.
CONTRACT = {
    "launch": ["spec", "dry_run"],
    "get": ["job_id"],
    "list": ["status", "experiment", "limit", "cursor"],
    "logs": ["job_id", "tail", "offset"],
    "metrics": ["job_id", "keys", "history", "max_points"],
    "wait": ["job_ids", "timeout_s", "any"],
    "cancel": ["job_id", "reason"],
    "gpus": [],
    "cordon": ["index", "reason"],
    "uncordon": ["index"],
    "compare": ["job_ids", "metric"],
}


def test_client_methods_take_the_contract_parameters() -> None:
    import inspect

    for method, params in CONTRACT.items():
        names = list(inspect.signature(getattr(air_skills.Client, method)).parameters)[1:]
        assert names[: len(params)] == params, (method, names)


def test_supervisor_start_path_imports_no_heavy_modules() -> None:
    code = (
        "import sys, air_skills.runtime.supervision.supervisor;"
        " heavy = [m for m in ('pydantic', 'mlflow', 'rich', 'typer', 'torch')"
        " if m in sys.modules];"
        " print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
