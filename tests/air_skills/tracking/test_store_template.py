"""A fresh home's MLflow store from the machine's template (issue 24: the first launch spent
15.9 s in MLflow's migrations): kept once, copied after, refused when another user could
have written it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from air_skills.tracking.mlflow import MlflowTracker
from air_skills.tracking.sqlite_store import inspect, template_path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _open(home: Path) -> None:
    home.mkdir(parents=True)
    tracker = MlflowTracker(home)
    tracker.client.search_experiments(max_results=1)


def test_the_first_store_is_kept_and_a_later_home_copies_it(tmp_path: Path, cache: Path) -> None:
    _open(tmp_path / "h1")
    template = template_path()
    assert template is not None and template.is_file() and cache in template.parents
    assert oct(template.stat().st_mode & 0o777) == "0o600"
    assert oct(template.parent.stat().st_mode & 0o777) == "0o700"
    kept = template.stat().st_mtime_ns
    state = inspect(template)
    assert state.exists and state.problem is None and state.runs == 0
    _open(tmp_path / "h2")
    copied = inspect(tmp_path / "h2" / "mlflow.db")
    assert copied.exists and copied.problem is None
    assert template.stat().st_mtime_ns == kept  # copied, not built and kept again


def test_a_template_others_could_write_is_not_used(tmp_path: Path, cache: Path) -> None:
    _open(tmp_path / "h1")
    template = template_path()
    assert template is not None
    os.chmod(template, 0o666)  # another user could have put anything there
    _open(tmp_path / "h2")
    assert inspect(tmp_path / "h2" / "mlflow.db").problem is None
    assert oct(template.stat().st_mode & 0o777) == "0o600"  # built anew, and kept anew
