"""Helpers the example training scripts share: strict config, MLflow logging, summary, checkpoints.

Exit codes the examples use: 2 = bad config (or a checkpoint that does not fit it), 3 = the loss
became NaN or infinite, 143 = stopped by SIGTERM after saving a checkpoint (cancel, preemption,
timeout: AIR sends SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

EXIT_BAD_CONFIG = 2
EXIT_NON_FINITE = 3
EXIT_STOPPED = 128 + signal.SIGTERM
_STOP = {"requested": False}


def stop_on_sigterm() -> None:
    """On SIGTERM the training loop finishes its step, saves a checkpoint and exits (see
    ``stopped``): a preempted job resumes from the step it reached, not its last evaluation."""

    def request(signum: int, frame: Any) -> None:
        _STOP["requested"] = True

    signal.signal(signal.SIGTERM, request)


def stopped(step: int, save: Any) -> None:
    """Call after each step: when SIGTERM came, save and exit with EXIT_STOPPED."""
    if _STOP["requested"]:
        save()
        print(f"stopped by SIGTERM at step {step}: checkpoint saved", flush=True)
        sys.exit(EXIT_STOPPED)


MLFLOW_ENV = ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID")


def fail(message: str, code: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def _type_problem(key: str, default: Any, value: Any) -> str | None:
    """Why `value` cannot replace `default`, or None when it can (an int may stand for a float)."""
    if isinstance(default, bool) or isinstance(value, bool):
        ok = isinstance(default, bool) and isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float))
    else:
        ok = type(value) is type(default)
    if ok:
        return None
    return (
        f"{key}: expected {type(default).__name__} (default {default!r}), "
        f"got {type(value).__name__} {value!r}"
    )


def _parse_value(raw: str, default: Any) -> Any:
    """A flag's value: text for a text key, else read as JSON (a number, true), else text."""
    if isinstance(default, str):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _parse_args(args: list[str], defaults: dict[str, Any]) -> tuple[list[tuple[str, Any]], list]:
    """The flags air passes (config_as: args | both), as (key, value) pairs, and the problems:
    ``--key=value``; ``--key`` alone is true; ``--key v1 v2`` is a list."""
    pairs: list[tuple[str, Any]] = []
    problems: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--") or len(arg) == 2:
            problems.append(f"argument {arg!r}: expected --key=value, --key or --key V1 V2")
            continue
        key, eq, raw = arg[2:].partition("=")
        key = key.replace("-", "_")
        if eq:
            pairs.append((key, _parse_value(raw, defaults.get(key))))
            continue
        values = []
        while i < len(args) and not args[i].startswith("--"):
            values.append(_parse_value(args[i], None))
            i += 1
        pairs.append((key, values if values else True))
    return pairs, problems


def load_config(defaults: dict[str, Any], argv: list[str] | None = None) -> dict[str, Any]:
    """The defaults, overridden by the JSON file at AIR_CONFIG_FILE, then by the flags air
    appends to the command (config_as: args | both): ``--key=value``, ``--key`` (true),
    ``--key V1 V2`` (a list).

    Like nanoGPT's configurator: an unknown key or a changed type is an error, never silently
    accepted. Every problem is listed at once, then the process exits with code 2.
    """
    overrides: list[tuple[str, str, Any]] = []  # (source, key, value)
    path = os.environ.get("AIR_CONFIG_FILE")
    if path:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            fail(f"cannot read config AIR_CONFIG_FILE={path}: {exc}", EXIT_BAD_CONFIG)
        if not isinstance(data, dict):
            fail(
                f"config {path} must hold a JSON object, not {type(data).__name__}", EXIT_BAD_CONFIG
            )
        overrides += [(path, k, v) for k, v in data.items()]
    pairs, problems = _parse_args(sys.argv[1:] if argv is None else argv, defaults)
    overrides += [("command line", k, v) for k, v in pairs]

    config = dict(defaults)
    for source, key, value in overrides:
        if key not in defaults:
            problems.append(f"{key}: unknown key (from {source})")
            continue
        problem = _type_problem(key, defaults[key], value)
        if problem:
            problems.append(f"{problem} (from {source})")
            continue
        config[key] = float(value) if isinstance(defaults[key], float) else value
    if problems:
        fail(
            "bad config:\n  "
            + "\n  ".join(problems)
            + "\n  valid keys: "
            + ", ".join(sorted(defaults)),
            EXIT_BAD_CONFIG,
        )
    return config


def check(config: dict[str, Any], rules: dict[str, tuple[bool, str]]) -> None:
    """Exits 2 listing every rule that fails; `rules` maps a key to (holds, what it must be)."""
    problems = [f"{k}={config[k]!r}: must be {what}" for k, (ok, what) in rules.items() if not ok]
    if problems:
        fail("bad config:\n  " + "\n  ".join(problems), EXIT_BAD_CONFIG)


def set_threads() -> None:
    """Use the job's CPU share: torch reads OMP_NUM_THREADS too, but not on every build."""
    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def pick_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        fail("device='cuda' but torch sees no GPU; use device='auto' or 'cpu'", EXIT_BAD_CONFIG)
    return name


def distributed(name: str) -> tuple[int, int, str]:
    """(rank, world size, device) of this process.

    Under torchrun (``air launch --procs N``: WORLD_SIZE > 1) it joins the process group:
    NCCL with one GPU per local rank when CUDA is there, gloo on CPU. Alone: rank 0 of 1.
    """
    device = pick_device(name)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, device
    import torch
    import torch.distributed as dist

    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return dist.get_rank(), world, device


class Tracker:
    """MLflow logging when the job has MLflow env (AIR sets it); otherwise printing only.

    With MLFLOW_RUN_ID the metrics go into that run (the one AIR created with the config as
    params); with only a tracking URI or experiment, a new run is started with the config.
    """

    def __init__(self, config: dict[str, Any], enabled: bool = True) -> None:
        self.logged: set[str] = set()
        self.mlflow: Any = None
        # In a gang every rank has the run's id; only rank 0 logs (enabled), once per step.
        if not enabled or not any(os.environ.get(k) for k in MLFLOW_ENV):
            return
        import mlflow  # only here: importing it takes over a second

        self.mlflow = mlflow
        run_id = os.environ.get("MLFLOW_RUN_ID")
        if run_id:
            mlflow.start_run(run_id=run_id)
        else:
            mlflow.start_run()
            mlflow.log_params(config)
        print(f"mlflow: logging to run {mlflow.active_run().info.run_id}", flush=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.mlflow is not None:
            self.mlflow.log_metrics(metrics, step=step)
            self.logged.update(metrics)

    def tag(self, key: str, value: Any) -> None:
        if self.mlflow is not None:
            self.mlflow.set_tag(key, str(value))

    def finish(self, status: str, summary: dict[str, float] | None = None, step: int = 0) -> None:
        """Logs the summary values not logged yet, then ends the run (FINISHED / FAILED)."""
        if self.mlflow is None:
            return
        rest = {k: v for k, v in (summary or {}).items() if k not in self.logged}
        if rest:
            self.mlflow.log_metrics(rest, step=step)
        self.mlflow.end_run(status=status)


def print_summary(values: dict[str, float]) -> None:
    """The block that AIR (or grep) reads: a `---` line, then `key: value` lines, numbers only."""
    lines = ["---"]
    for key, value in values.items():
        lines.append(f"{key}: {value:.6g}" if isinstance(value, float) else f"{key}: {value}")
    print("\n".join(lines), flush=True)


def check_finite(loss: float, step: int, tracker: Tracker, hint: str) -> None:
    """Fails fast on a NaN or infinite loss: message, run marked FAILED, exit code 3."""
    if math.isfinite(loss):
        return
    tracker.finish("FAILED")
    fail(f"loss is {loss} at step {step}: training diverged; {hint}", EXIT_NON_FINITE)


def checkpoint_path() -> Path | None:
    folder = os.environ.get("AIR_CHECKPOINT_DIR")
    return Path(folder) / "ckpt.pt" if folder else None


def save_checkpoint(path: Path | None, state: dict[str, Any]) -> None:
    """Written to a temporary file and renamed, so a job killed mid-save leaves the old one."""
    if path is None:
        return
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with quiet_phase("checkpoint", expect_min=10):  # a big model's save may take minutes
        torch.save(state, tmp)
        os.replace(tmp, path)


def quiet_phase(name: str, expect_min: float) -> Any:
    """``air_skills.job.phase`` (a stretch that prints nothing is then not a stall), or nothing
    where the toolkit is not installed."""
    try:
        from air_skills.job import phase
    except ImportError:
        return contextlib.nullcontext()
    return phase(name, expect_min)


def save_training(
    path: Path | None, model: Any, opt: Any, step: int, batch_gen: Any, config: dict[str, Any]
) -> None:
    """Save what resuming needs: weights, optimizer, step, batch order and the config (whose
    shape keys ``load_checkpoint`` checks). ``resume_training`` reads it back."""
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": step,
        "batch_rng": batch_gen.get_state(),
        "config": config,
    }
    save_checkpoint(path, state)


def resume_training(state: dict[str, Any], model: Any, opt: Any) -> int:
    """Load a ``save_training`` checkpoint's weights and optimizer; returns its step. The
    batch order (``state["batch_rng"]``) is the script's to restore."""
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return int(state["step"])


def load_checkpoint(
    path: Path | None, config: dict[str, Any], shape_keys: tuple[str, ...]
) -> dict[str, Any] | None:
    """The saved state, or None when there is none; exits 2 when its model shape differs."""
    if path is None or not path.exists():
        return None
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    saved = state.get("config", {})
    changed = [k for k in shape_keys if saved.get(k) != config[k]]
    if changed:
        detail = "; ".join(f"{k}: saved {saved.get(k)!r}, now {config[k]!r}" for k in changed)
        fail(
            f"checkpoint {path} was made for another model ({detail}); "
            "delete it or use another AIR_CHECKPOINT_DIR",
            EXIT_BAD_CONFIG,
        )
    return state
