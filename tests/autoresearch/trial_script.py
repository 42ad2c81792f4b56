"""A fast stand-in for a training script: reads AIR_CONFIG_FILE, reports a loss curve, and
records its own start and end times so that tests can check concurrency from the outside.

Config: x, y (the loss is (x-0.3)^2 + (y-0.6)^2 plus noise*seed jitter), steps, sleep_s per
step, log ("summary": only the closing `---` block; "mlflow": every step too), stamp_dir,
await_peer (with stamp_dir: hold until another run is live beside this one, see await_peer;
not the run whose x is free_x: the baseline, which runs alone),
metric (the objective's name), fail (raise; fail_message: the error's text), noise,
hang_once (a marker file: the first run to create it prints "up" and sleeps a minute),
hang_when_x (a run whose x is this value goes silent and never ends: no output, no metric),
hold_while (a file: while it exists a run waits, 120 s at most, before its steps; the run
whose x is free_x does not: the baseline, say), holdout (a metric name, true: test_loss,
printed only when AIR_EVAL_SPLIT is `test`: the loss plus holdout_noise x its own seed
jitter, plus the file $AIR_DATA_DIR/heldout/offset's number when there is one), leak (print
the holdout metric in the search too), read_file (a path read first: it fails when it cannot).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path


def await_peer(stamps: Path, job: str) -> None:
    """Hold until another run is live beside this one (its start stamped, its end not), so a
    test of concurrency sees the overlap however slowly the launches go on a loaded machine;
    once one run has seen it, the others go on at once. Gives up after 30 s: under a loop
    that never runs two at once each run goes on alone, and the stamps show a peak of one."""
    seen = stamps / "overlap-seen"
    deadline = time.monotonic() + 30
    while not seen.exists() and time.monotonic() < deadline:
        for start in stamps.glob("*.start"):
            if start.stem != job and not start.with_suffix(".end").exists():
                seen.write_text(job)
                return
        time.sleep(0.05)


def main() -> None:
    cfg = json.loads(Path(os.environ["AIR_CONFIG_FILE"]).read_text())
    started = time.time()
    stamp_dir = cfg.get("stamp_dir")
    job = os.environ.get("AIR_JOB_ID", "local")
    if stamp_dir:
        Path(stamp_dir, f"{job}.start").write_text(json.dumps({"t": started, **cfg}))
        x_here = float(cfg.get("x", 0.0))
        if cfg.get("await_peer") and x_here != float(cfg.get("free_x", "nan")):
            await_peer(Path(stamp_dir), job)  # the baseline (free_x) runs before any peer
    hang_once = cfg.get("hang_once")
    if hang_once and not Path(hang_once).exists():
        Path(hang_once).write_text(job)
        print("up", flush=True)
        time.sleep(60)
    if cfg.get("read_file"):
        print("read:", Path(cfg["read_file"]).read_text()[:40], flush=True)
    x, y = float(cfg.get("x", 0.0)), float(cfg.get("y", 0.0))
    if cfg.get("hang_when_x") is not None and x == float(cfg["hang_when_x"]):
        while True:  # silent: no output, no metric
            time.sleep(0.05)
    hold = cfg.get("hold_while")
    if hold and x != float(cfg.get("free_x", "nan")):
        deadline = time.monotonic() + 120
        while Path(hold).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    jitter = random.Random(cfg.get("seed", 0)).gauss(0, 1) * float(cfg.get("noise", 0.0))
    final = (x - 0.3) ** 2 + (y - 0.6) ** 2 + jitter
    steps = int(cfg.get("steps", 3))
    metric = cfg.get("metric", "loss")
    client = None
    if cfg.get("log") == "mlflow":
        from mlflow.tracking import MlflowClient

        client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    for step in range(steps + 1):
        value = final + 1.0 / (1 + step)
        if client is not None:
            client.log_metric(os.environ["MLFLOW_RUN_ID"], metric, value, step=step)
        print(f"step {step} {metric} {value:.4f}", flush=True)
        if cfg.get("fail"):
            raise RuntimeError(cfg.get("fail_message") or f"boom: x={x} breaks the model")
        if step < steps:
            time.sleep(float(cfg.get("sleep_s", 0.1)))
    if stamp_dir:
        Path(stamp_dir, f"{job}.end").write_text(json.dumps({"t": time.time()}))
    print("---")
    print(f"{metric}: {final + 1.0 / (1 + steps)}")
    print(f"other_metric: {x}")
    holdout = "test_loss" if cfg.get("holdout") is True else cfg.get("holdout")
    if holdout and (os.environ.get("AIR_EVAL_SPLIT") == "test" or cfg.get("leak")):
        rng = random.Random(f"holdout-{cfg.get('seed', 0)}")
        offset = Path(os.environ.get("AIR_DATA_DIR", "/nonexistent"), "heldout", "offset")
        shift = float(offset.read_text()) if offset.exists() else 0.0
        held = (x - 0.3) ** 2 + (y - 0.6) ** 2 + 1.0 / (1 + steps) + shift
        print(f"{holdout}: {held + rng.gauss(0, 1) * float(cfg.get('holdout_noise', 0.0))}")
    sys.exit(0)


if __name__ == "__main__":
    main()
