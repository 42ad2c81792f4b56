"""Fixtures for the autoresearch tests: a scripted LLM server, a ready MLflow store."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # llm_server, ar_helpers: helpers beside the tests

from llm_server import FakeLLMServer  # noqa: E402


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow sqlite store created once: a fresh one takes many seconds to migrate."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments(max_results=1)
    return db


@pytest.fixture
def study_home(air_home: Path, mlflow_template: Path) -> Path:
    """The core's AIR_HOME fixture (4 simulated GPUs), with the MLflow store made already."""
    air_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(mlflow_template, air_home / "mlflow.db")
    return air_home


@pytest.fixture
def llm_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with FakeLLMServer() as server:
        yield server
