"""The example training scripts, run as real processes against a real MLflow sqlite store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Tiny runs: enough steps for the loss to fall, few enough to keep this file well under 60 s.
TINY = {
    "tinygpt": {"steps": 40, "eval_every": 20, "eval_batches": 2},
    "mlp": {"steps": 100, "eval_every": 50},
}


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def new_run(tracking_uri: str) -> dict[str, str]:
    """A run created beforehand, as AIR does before it starts a job; returns the job's env."""
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("examples")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("examples")
    return {
        "MLFLOW_TRACKING_URI": tracking_uri,
        "MLFLOW_EXPERIMENT_ID": experiment_id,
        "MLFLOW_RUN_ID": client.create_run(experiment_id).info.run_id,
    }


@pytest.fixture()
def mlflow_env(tracking_uri: str) -> dict[str, str]:
    return new_run(tracking_uri)


def start_example(
    name: str, config: dict, folder: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Starts `examples/NAME/train.py` with its config file and checkpoint folder in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    config_file = folder / f"config-{len(list(folder.glob('config-*')))}.json"
    config_file.write_text(json.dumps(config))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AIR_", "OMP_"))}
    full_env = {
        **clean,
        "OMP_NUM_THREADS": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",  # its exit-time upload adds ~0.6 s to every run
        "AIR_CONFIG_FILE": str(config_file),
        "AIR_CHECKPOINT_DIR": str(folder / "ckpt"),
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / name / "train.py")],
        cwd=folder,  # not the repo root: the scripts must find their helpers from anywhere
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_example(
    name: str, config: dict, folder: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return finish(start_example(name, config, folder, env))


def summary(stdout: str) -> dict[str, float]:
    lines = stdout.splitlines()
    assert "---" in lines, stdout
    block = lines[len(lines) - lines[::-1].index("---") :]
    return {key: float(value) for key, value in (line.split(": ", 1) for line in block)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tinygpt", "mlp"])
def test_trains_logs_to_mlflow_and_resumes(
    name: str, tmp_path: Path, mlflow_env: dict[str, str]
) -> None:
    config = TINY[name]
    steps, every = config["steps"], config["eval_every"]
    first = run_example(name, config, tmp_path, mlflow_env)
    assert first.returncode == 0, first.stderr

    client = MlflowClient(mlflow_env["MLFLOW_TRACKING_URI"])
    run_id = mlflow_env["MLFLOW_RUN_ID"]
    history = [(m.step, m.value) for m in client.get_metric_history(run_id, "val_loss")]
    assert [s for s, _ in history] == list(range(0, steps + 1, every))
    assert history[0][1] > history[-1][1], history
    result = summary(first.stdout)
    assert {"val_loss", "train_loss", "steps", "params", "elapsed_s"} <= result.keys()
    assert result["steps"] == steps
    assert result["val_loss"] == pytest.approx(history[-1][1], rel=1e-4)
    assert client.get_run(run_id).info.status == "FINISHED"
    assert (tmp_path / "ckpt" / "ckpt.pt").exists()

    # A second attempt with the same checkpoint folder continues where the first stopped.
    second = run_example(name, {**config, "steps": steps + every}, tmp_path, mlflow_env)
    assert second.returncode == 0, second.stderr
    assert f"at step {steps}" in second.stdout
    steps_logged = [m.step for m in client.get_metric_history(run_id, "val_loss")]
    assert steps_logged == list(range(0, steps + every + 1, every))
    assert client.get_run(run_id).data.tags["resumed_from_step"] == str(steps)
    assert summary(second.stdout)["steps"] == steps + every

    # A checkpoint made for another model shape is refused, not silently loaded or dropped.
    other = run_example(name, {**config, "n_layer": 1}, tmp_path)
    assert other.returncode == 2
    assert "another model" in other.stderr and "n_layer" in other.stderr


def test_bad_config_exits_2_listing_every_problem(tmp_path: Path) -> None:
    bad = {"learning_rate": 0.1, "steps": "ten", "n_layer": 2.0, "lr": True}
    procs = {name: start_example(name, bad, tmp_path / name) for name in TINY}  # side by side
    for proc in procs.values():
        result = finish(proc)
        assert result.returncode == 2, result.stderr
        for problem in (
            "learning_rate: unknown key",
            "steps: expected int",
            "n_layer: expected int",
            "lr: expected float",
            "valid keys: ",
        ):
            assert problem in result.stderr


def test_int_for_float_is_accepted_and_no_mlflow_env_means_no_mlflow(tmp_path: Path) -> None:
    # An mlflow that cannot be imported: the run fails if the script imports it anyway.
    (tmp_path / "poison" / "mlflow").mkdir(parents=True)
    (tmp_path / "poison" / "mlflow" / "__init__.py").write_text("raise ImportError('used')\n")
    env = {"PYTHONPATH": str(tmp_path / "poison")}
    result = run_example("mlp", {"steps": 0, "lr": 1, "dropout": 0}, tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert summary(result.stdout)["steps"] == 0


def test_diverging_loss_exits_3_and_fails_the_run(tmp_path: Path, tracking_uri: str) -> None:
    # One Adam step at lr 1e9 moves every weight by about 1e9: the next forward pass overflows.
    config = {"lr": 1e9, "steps": 5, "eval_every": 5}
    envs = {name: new_run(tracking_uri) for name in TINY}
    procs = {
        "tinygpt": start_example(
            "tinygpt", {**config, "warmup_steps": 1}, tmp_path / "t", envs["tinygpt"]
        ),
        "mlp": start_example("mlp", config, tmp_path / "m", envs["mlp"]),
    }
    for name, proc in procs.items():
        result = finish(proc)
        assert result.returncode == 3, result.stdout + result.stderr
        assert "training diverged" in result.stderr
        run = MlflowClient(tracking_uri).get_run(envs[name]["MLFLOW_RUN_ID"])
        assert run.info.status == "FAILED"


@pytest.mark.parametrize("name", ["tinygpt", "mlp"])
def test_a_preempted_example_saves_and_resumes_from_the_step_it_reached(
    name: str, tmp_path: Path
) -> None:
    # Evaluations (and their checkpoints) far apart: only the SIGTERM save can keep the work.
    config = {**TINY[name], "steps": 100_000, "eval_every": 50_000}
    proc = start_example(name, config, tmp_path)
    assert proc.stdout is not None
    for line in proc.stdout:  # the first evaluation (step 0) is printed once training runs
        if line.startswith("step"):
            break
    # Whenever it lands, the step in progress ends first: at least one step past the evaluation.
    proc.send_signal(signal.SIGTERM)
    rest = finish(proc)
    assert rest.returncode == 143, rest.stderr
    stopped = [line for line in rest.stdout.splitlines() if line.startswith("stopped by SIGTERM")]
    assert stopped, rest.stdout
    reached = int(stopped[0].split("at step ")[1].split(":")[0])
    assert reached > 0  # past the last evaluation (step 0)
    again = start_example(name, {**config, "steps": reached + 1}, tmp_path)
    out = finish(again)
    assert out.returncode == 0, out.stderr
    assert f"at step {reached}" in out.stdout  # resumed where it stopped, not at step 0


@pytest.mark.parametrize("name", ["tinygpt", "mlp"])
def test_the_held_out_split_only_with_air_eval_split_test(name: str, tmp_path: Path) -> None:
    """Issue 40: each example logs test_loss only when AIR_EVAL_SPLIT is `test`, and reads its
    held-out split from the data input `heldout` ($AIR_DATA_DIR/heldout: the MLP's extra draw,
    the tiny GPT's left-out text), never computing it; val_loss is the same number either way
    (the search's split is untouched). Without the input, `test` fails saying where it looked."""
    config = {**TINY[name], "steps": 20, "eval_every": 20}
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "heldout").symlink_to(EXAMPLES / name / "heldout")
    bound = {"AIR_DATA_DIR": str(data_dir)}
    val = run_example(name, config, tmp_path / "val", {"AIR_EVAL_SPLIT": "val"})
    test = run_example(name, config, tmp_path / "test", {"AIR_EVAL_SPLIT": "test", **bound})
    assert val.returncode == 0 and test.returncode == 0, val.stderr[-2000:] + test.stderr[-2000:]
    searched, held = summary(val.stdout), summary(test.stdout)
    assert "test_loss" not in searched
    assert held["test_loss"] > 0
    assert held["val_loss"] == pytest.approx(searched["val_loss"], rel=1e-6)
    empty = tmp_path / "no-data"
    empty.mkdir()
    for env in ({}, {"AIR_DATA_DIR": str(empty)}):  # a search trial's view: no such input
        missing = run_example(name, config, tmp_path / "missing", {"AIR_EVAL_SPLIT": "test", **env})
        assert missing.returncode == 2, missing.stderr[-2000:]
        assert "held-out split" in missing.stderr and "heldout" in missing.stderr
