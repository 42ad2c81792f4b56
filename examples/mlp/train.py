"""A small MLP classifying interleaved spirals hidden among noise features (generated, no download).

Run: `python examples/mlp/train.py [--key=value ...]`; under AIR the config arrives as JSON in
AIR_CONFIG_FILE. Logs train_loss, val_loss and val_acc to MLflow when the MLflow env is set
(test_loss and test_acc too with AIR_EVAL_SPLIT=test, from the held-out input: an extra draw
that ``examples/make_heldout.py`` made once and a study binds only into its final runs),
saves and resumes `$AIR_CHECKPOINT_DIR/ckpt.pt`, ends with a `---` summary block.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common

DEFAULTS = {
    "lr": 3e-3,  # AdamW peak learning rate, cosine-decayed to 0 at `steps`
    "weight_decay": 0.0,  # AdamW decoupled weight decay
    "n_layer": 3,  # hidden layers
    "hidden": 128,  # units per hidden layer
    "activation": "relu",  # relu | gelu | tanh
    "dropout": 0.0,  # dropout probability after each hidden layer, 0.0 to 0.5
    "batch_size": 128,  # examples per optimizer step
    "steps": 2000,  # optimizer steps in all; a resumed run continues up to this
    "eval_every": 100,  # steps between evaluations, metric logs and checkpoints
    "seed": 0,  # model init and batch order; the dataset does not depend on it
    "device": "auto",  # auto | cpu | cuda
}
SHAPE_KEYS = ("n_layer", "hidden", "activation")  # must match to resume
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}

N_CLASSES, N_FEATURES, N_TRAIN, N_VAL, N_TEST = 4, 16, 6000, 2000, 2000
HELD_OUT_INPUT = "heldout"  # the data input's name: $AIR_DATA_DIR/heldout/test.npz


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` examples before the rotation: the spirals' two dimensions and the noise ones."""
    labels = rng.integers(0, N_CLASSES, n)
    t = rng.uniform(0.05, 1.0, n)
    angle = 3 * np.pi * t + 2 * np.pi * labels / N_CLASSES
    spiral = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1)
    spiral += rng.normal(0, 0.05, spiral.shape)
    noise = rng.normal(0, 0.3, (n, N_FEATURES - 2))
    return np.concatenate([spiral * 2, noise], axis=1), labels


def rotation() -> np.ndarray:
    """The fixed rotation that hides the spirals among the noise dimensions."""
    rng = np.random.default_rng(20240601)
    _draw(rng, N_TRAIN + N_VAL)
    q, _ = np.linalg.qr(rng.normal(size=(N_FEATURES, N_FEATURES)))
    return q


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """Four interleaved 2-D spirals plus 14 noise features, all rotated together; fixed seed.
    The training and validation examples only: the held-out split is not made here."""
    raw, labels = _draw(np.random.default_rng(20240601), N_TRAIN + N_VAL)
    return torch.tensor(raw @ rotation(), dtype=torch.float32), torch.tensor(labels)


def load_held_out() -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out split, from the data input ``heldout`` ($AIR_DATA_DIR/heldout/test.npz):
    a study binds it (read-only) into its final re-evaluation runs only; exits 2 when absent."""
    path = Path(os.environ.get("AIR_DATA_DIR", "")) / HELD_OUT_INPUT / "test.npz"
    if not os.environ.get("AIR_DATA_DIR") or not path.is_file():
        common.fail(
            f"AIR_EVAL_SPLIT=test but the held-out split {path} is not there: it is the data"
            f" input {HELD_OUT_INPUT!r} (objective.holdout.data in study.yaml), bound only into"
            " a study's final re-evaluation runs; make it with examples/make_heldout.py",
            common.EXIT_BAD_CONFIG,
        )
    with np.load(path) as held:
        return torch.tensor(held["x"], dtype=torch.float32), torch.tensor(held["y"])


def main() -> None:
    cfg = common.load_config(DEFAULTS)
    common.check(
        cfg,
        {
            "n_layer": (cfg["n_layer"] > 0, "positive"),
            "hidden": (cfg["hidden"] > 0, "positive"),
            "activation": (cfg["activation"] in ACTIVATIONS, " | ".join(ACTIVATIONS)),
            "dropout": (0.0 <= cfg["dropout"] < 1.0, "in [0, 1)"),
            "lr": (cfg["lr"] > 0, "positive"),
            "steps": (cfg["steps"] >= 0, ">= 0"),
            "eval_every": (cfg["eval_every"] > 0, "positive"),
            "batch_size": (cfg["batch_size"] > 0, "positive"),
            "device": (cfg["device"] in ("auto", "cpu", "cuda"), "auto, cpu or cuda"),
        },
    )
    start = time.perf_counter()
    common.set_threads()
    common.stop_on_sigterm()
    device = common.pick_device(cfg["device"])
    torch.manual_seed(cfg["seed"])
    ckpt_path = common.checkpoint_path()
    state = common.load_checkpoint(ckpt_path, cfg, SHAPE_KEYS)

    x, y = make_dataset()
    x, y = x.to(device), y.to(device)
    x_train, y_train, x_val, y_val = x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]
    # The held-out split: read only in an autoresearch study's final re-evaluation runs, the
    # only runs its data input is bound into (a search trial cannot see the file).
    held_out = os.environ.get("AIR_EVAL_SPLIT") == "test"
    x_test, y_test = (t.to(device) for t in load_held_out()) if held_out else (None, None)

    layers: list[nn.Module] = []
    width = N_FEATURES
    for _ in range(cfg["n_layer"]):
        layers += [nn.Linear(width, cfg["hidden"]), ACTIVATIONS[cfg["activation"]]()]
        layers += [nn.Dropout(cfg["dropout"])] if cfg["dropout"] > 0 else []
        width = cfg["hidden"]
    model = nn.Sequential(*layers, nn.Linear(width, N_CLASSES)).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    batch_gen = torch.Generator().manual_seed(cfg["seed"])

    tracker = common.Tracker(cfg)
    step = 0
    if state is not None:
        step = common.resume_training(state, model, opt)
        batch_gen.set_state(state["batch_rng"])
        print(f"resumed from {ckpt_path} at step {step}", flush=True)
        tracker.tag("resumed_from_step", step)
    print(
        f"mlp: {n_params:,} params, {N_TRAIN} train / {N_VAL} val examples, "
        f"device {device}, steps {step}->{cfg['steps']}",
        flush=True,
    )

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        model.eval()
        val_logits = model(x_val)
        out = {
            "val_loss": F.cross_entropy(val_logits, y_val).item(),
            "train_loss": F.cross_entropy(model(x_train[:N_VAL]), y_train[:N_VAL]).item(),
            "val_acc": (val_logits.argmax(1) == y_val).float().mean().item(),
        }
        if x_test is not None:
            test_logits = model(x_test)
            out["test_loss"] = F.cross_entropy(test_logits, y_test).item()
            out["test_acc"] = (test_logits.argmax(1) == y_test).float().mean().item()
        model.train()
        return out

    def save() -> None:
        common.save_training(ckpt_path, model, opt, step, batch_gen, cfg)

    resumed_at = step if state is not None else None
    metrics: dict[str, float] = {}
    while True:
        if (step % cfg["eval_every"] == 0 or step >= cfg["steps"]) and step != resumed_at:
            metrics = evaluate()
            common.check_finite(metrics["val_loss"], step, tracker, "lower lr")
            tracker.log(metrics, step)
            print(
                f"step {step:5d} | train_loss {metrics['train_loss']:.4f} | "
                f"val_loss {metrics['val_loss']:.4f} | val_acc {metrics['val_acc']:.3f} | "
                f"{time.perf_counter() - start:.1f}s",
                flush=True,
            )
            save()
        if step >= cfg["steps"]:
            break
        for group in opt.param_groups:
            group["lr"] = cfg["lr"] * 0.5 * (1 + math.cos(math.pi * step / cfg["steps"]))
        ix = torch.randint(N_TRAIN, (cfg["batch_size"],), generator=batch_gen).to(device)
        loss = F.cross_entropy(model(x_train[ix]), y_train[ix])
        common.check_finite(loss.item(), step, tracker, "lower lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        common.stopped(step, save)

    if not metrics:  # resumed at the final step: nothing trained, report the saved model
        metrics = evaluate()
    summary = {
        **metrics,
        "steps": step,
        "params": n_params,
        "elapsed_s": time.perf_counter() - start,
    }
    tracker.finish("FINISHED", summary, step)
    common.print_summary(summary)


if __name__ == "__main__":
    main()
