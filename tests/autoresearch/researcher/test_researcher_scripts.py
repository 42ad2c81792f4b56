"""A researcher's own script runs a useful study on the first try (issue 38, Tests): five
scripts written the usual way (scripts/: argparse only; set_experiment + autolog; a Hugging
Face-style download into HF_HOME from a file server on 127.0.0.1; a torch.hub-style cache;
./checkpoints), each run as a study of a few trials from a fresh AIR_HOME with the sandbox
on: every trial runs, values differ where configs differ, artifacts sit under the home, the
checkpoint folders are named."""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ar_helpers import small_study

from air_skills.runtime.execution import sandbox
from autoresearch.api import get_study
from autoresearch.journal.journal import TrialStatus
from autoresearch.loop.loop import run_study
from autoresearch.study.study import parse_study

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture(autouse=True)
def _sandbox_on(monkeypatch: pytest.MonkeyPatch) -> None:
    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    monkeypatch.setenv("AIR_SANDBOX", "on")


def study_of(script: str, base: dict, space: dict, **kw: object):
    study = small_study(
        name=Path(script).stem.replace("_", "-"),
        command=["python", script],
        workdir=str(SCRIPTS),
        search_space=space,
        objective={"metric": "val_loss", "direction": "minimize"},
        budget={"trials": 3, "concurrency": 2},
        sandbox="on",
        **kw,
    )
    study["base_config"] = base  # the script's own flags, nothing else
    return parse_study(study)


def run(study, tmp_path: Path):
    folder = tmp_path / "study"
    result = run_study(study, folder, poll_s=0.1)
    trials = result.state.ordered()
    failed = [
        (t.number, t.failure, t.log_tail) for t in trials if t.status != TrialStatus.SUCCEEDED
    ]
    assert not failed, failed
    assert len(trials) == 3 and not result.state.checks, result.state.checks
    values = {t.value for t in trials}
    configs = {repr(sorted(t.config.items())) for t in trials}
    assert len(values) == len(configs) == 3  # the config reached the script: values differ
    return result, get_study(folder)


def test_argparse_only(study_home: Path, tmp_path: Path) -> None:
    study = study_of(
        "train_argparse.py",
        {"lr": 0.01, "hidden": [16, 16], "amp": False, "steps": 40},
        {"lr": {"type": "float", "low": 0.001, "high": 0.2, "log": True}},
    )
    run(study, tmp_path)


def test_set_experiment_and_autolog(study_home: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    study = study_of(
        "train_mlflow_autolog.py",
        {"alpha": 1.0},
        {"alpha": {"type": "float", "low": 0.01, "high": 100.0, "log": True}},
    )
    result, _ = run(study, tmp_path)
    mc = MlflowClient(f"sqlite:///{study_home / 'mlflow.db'}")
    for t in result.state.ordered():
        run_ = mc.get_run(t.run_id)
        assert run_.data.tags["air.asked_experiment"] == "my-ridge-experiments"
        assert run_.data.params["alpha"] == str(t.config["alpha"])  # autolog's, into the run
        location = mc.get_experiment(run_.info.experiment_id).artifact_location
        assert location.startswith((study_home / "mlartifacts").resolve().as_uri()), location
    assert len(list((study_home / "mlartifacts").rglob("coefs.txt"))) == 3  # under the home


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[str]:
    """A Hugging Face-style file host on 127.0.0.1: the "model" the script downloads."""
    root = tmp_path / "hub"
    root.mkdir()
    (root / "weights.txt").write_text("0.5 0.25 0.125")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(root))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/weights.txt"
    server.shutdown()


def test_hf_style_cache_download(
    study_home: Path, tmp_path: Path, file_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HF_HOME writable in a sandboxed job and kept for the next jobs (issue 38.5). The local
    file server stands in for the hub: on the host's 127.0.0.1, which a sandboxed job reaches
    only where the user grants it (AIR_SANDBOX_NETWORK=host; the hub itself is outside)."""
    monkeypatch.setenv("AIR_SANDBOX_NETWORK", "host")
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    study = study_of(
        "train_hf_cache.py",
        {"url": file_server, "scale": 1.0},
        {"scale": {"type": "float", "low": 0.1, "high": 10.0}},
    )
    run(study, tmp_path)
    kept = [*hf_home.rglob("blobs/*"), *(study_home / "cache").rglob("blobs/*")]
    assert len(kept) == 1, kept  # downloaded once (HF_HOME, or as root the jobs' cache)


def test_torch_hub_style_cache(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Needs the sandbox's caches (issue 38.5): TORCH_HOME writable in a sandboxed job."""
    torch_home = tmp_path / "torch-home"
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    study = study_of(
        "train_torch_hub.py", {"lr": 0.1}, {"lr": {"type": "float", "low": -1.0, "high": 1.0}}
    )
    run(study, tmp_path)
    # the user's TORCH_HOME; run as root, the jobs' shared cache under AIR_HOME (another uid)
    kept = [*torch_home.rglob("tiny-pretrained.pt"), *study_home.rglob("tiny-pretrained.pt")]
    assert len(kept) == 1, kept  # downloaded once, found by the next trials


def test_checkpoints_folder_is_named(study_home: Path, tmp_path: Path) -> None:
    study = study_of(
        "train_checkpoints.py",
        {"lr": 0.1, "epochs": 3},
        {"lr": {"type": "float", "low": 0.01, "high": 0.5}},
    )
    result, summary = run(study, tmp_path)
    views = [o for r in summary["recent"] for o in r["outputs"] if "/code/" in o]
    named = [o for o in views if o.endswith("/checkpoints")]
    assert len(named) == 3, summary["recent"]
    for path in named:
        assert (Path(path) / "epoch2.json").exists()
    assert summary["best"]["outputs"], summary["best"]


if sys.platform != "linux":  # bubblewrap: Linux only
    pytestmark = pytest.mark.skip("the sandbox is Linux only")
