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


def test_client_methods_of_the_contract() -> None:
    for method in (
        "launch",
        "get",
        "list",
        "logs",
        "metrics",
        "wait",
        "cancel",
        "gpus",
        "cordon",
        "uncordon",
        "compare",
    ):
        assert callable(getattr(air_skills.Client, method))


def test_supervisor_start_path_imports_no_heavy_modules() -> None:
    code = (
        "import sys, air_skills.runtime.supervisor;"
        " heavy = [m for m in ('pydantic', 'mlflow', 'rich', 'typer', 'torch')"
        " if m in sys.modules];"
        " print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
