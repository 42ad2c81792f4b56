"""The overfit gap on the bundled MLP example (``bench/overfit.py --task mlp``): real training
runs of examples/mlp/train.py, the loop's own rules.

A config is a point in [0, 1]^2: ``lr`` log-uniform in [3e-4, 3e-2] and ``weight_decay`` in
[0, 0.3]; the rest is the demo's base (300 steps). The base is the demo's (lr 1e-3, no weight
decay: it underfits). Each run trains in this process (one thread) with ``AIR_EVAL_SPLIT=test``
and the shipped held-out input bound as ``$AIR_DATA_DIR/heldout``: it gives ``val_loss``,
which alone drives the rules, and ``test_loss``, which only the figures read. Study ``s`` runs
its search trials with seed ``100000 s``, its noise repeats and re-runs with the loop's
seeds plus ``100000 s``: studies differ in seed luck and in the proposer's draws.

One study per rule gives both rows: without the final re-evaluation, the search's kept best
against the baseline (validation: its search value against the baseline's runs' mean;
held-out: the same runs' test_loss); with it, the final's winner against the baseline, both
by their re-runs' means. The regret is not known (no truth): the goal's row compares the
held-out gain instead. A (config, seed) pair trains once and is reused across rules.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from overfit import ARMS, Result, SimStudy, make_study, report

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mlp"
LR_LOW, LR_HIGH = 3e-4, 3e-2
WD_HIGH = 0.3
BASE = {"steps": 300, "eval_every": 150}  # the demo's base length; two evaluations


def config_of(x: tuple[float, float], seed: int) -> dict[str, Any]:
    lr = LR_LOW * (LR_HIGH / LR_LOW) ** x[0]
    return {**BASE, "lr": round(lr, 8), "weight_decay": round(WD_HIGH * x[1], 6), "seed": seed}


class Trainer:
    """examples/mlp/train.py's ``main`` run in this process: one (config, seed) trains once."""

    def __init__(self) -> None:
        os.environ["OMP_NUM_THREADS"] = "1"
        sys.path.insert(0, str(EXAMPLE))
        import torch
        import train  # examples/mlp/train.py

        torch.set_num_threads(1)
        self.main = train.main
        self.folder = Path(tempfile.mkdtemp(prefix="overfit-mlp-"))
        (self.folder / "heldout").symlink_to(EXAMPLE / "heldout")
        self.cache: dict[str, tuple[float, float]] = {}
        self.runs = 0

    def __call__(self, config: dict[str, Any]) -> tuple[float, float]:
        key = json.dumps(config, sort_keys=True)
        if key not in self.cache:
            path = self.folder / "config.json"
            path.write_text(key)
            os.environ.update(
                AIR_CONFIG_FILE=str(path), AIR_EVAL_SPLIT="test", AIR_DATA_DIR=str(self.folder)
            )
            out = io.StringIO()
            argv, sys.argv = sys.argv, ["train.py"]
            try:
                with contextlib.redirect_stdout(out):
                    self.main()
            finally:
                sys.argv = argv
            block = out.getvalue().rsplit("\n---\n", 1)[1]
            got = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            self.cache[key] = (float(got["val_loss"]), float(got["test_loss"]))
            self.runs += 1
        return self.cache[key]


class MlpWorld:
    """One study's task: the MLP's runs; ``test`` keeps each trial's held-out value."""

    base = (math.log(1e-3 / LR_LOW) / math.log(LR_HIGH / LR_LOW), 0.0)  # lr 1e-3, no decay

    def __init__(self, study_seed: int, trainer: Trainer) -> None:
        self.offset, self.trainer = 100_000 * study_seed, trainer
        self.test: dict[int, float] = {}

    def val(self, x: tuple[float, float], seed: int, trial: int) -> float:
        val, test = self.trainer(config_of(x, seed + self.offset))
        self.test[trial] = test
        return val


class MlpStudy(SimStudy):
    world: MlpWorld

    def result(self, winner: int, base_val: float, win_val: float, final_runs: bool) -> Result:
        """Held-out figures from the runs' test_loss: the baseline's and the winner's runs
        that gave the validation figures (the search's own, or the re-runs)."""
        trials = self.state.trials.values()
        if final_runs:
            held = {
                k: statistics.fmean(
                    self.world.test[t.number] for t in trials if t.final_of == k
                )
                for k in (0, winner)
            }  # fmt: skip
        else:
            base = [self.world.test[t.number] for t in trials if t.source in ("baseline", "noise")]
            held = {0: statistics.fmean(base)}
            held[winner] = held[0] if winner == 0 else self.world.test[winner]
        return Result(
            val_gain=base_val - win_val,
            held_gain=held[0] - held[winner],
            regret=float("nan"),
            trials=len(self.state.trials),
        )


def run(studies: int, budget: int, step: float) -> int:
    started, load = time.perf_counter(), os.getloadavg()[0]
    trainer = Trainer()
    results: dict[tuple[str, bool], list[Result]] = {}
    for arm in ARMS:
        study = make_study(arm, budget, with_final=True, base=MlpWorld.base)
        searched, finals = [], []
        for s in range(studies):
            sim = MlpStudy(study, MlpWorld(s, trainer), s, step)  # type: ignore[arg-type]
            finals.append(sim.play())
            searched.append(sim.searched)
        results[(arm, False)], results[(arm, True)] = searched, finals
    took = time.perf_counter() - started
    print(
        f"examples/mlp: {studies} studies x {budget} search trials per rule, final top 3 x 3"
        f" seeds; val_loss and test_loss in nats; {trainer.runs} training runs in {took:.0f} s;"
        f" load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    return report(results, regret=False)


if __name__ == "__main__":  # bench/overfit.py --task mlp runs it: STUDIES BUDGET STEP
    studies, budget, step = sys.argv[1:4]
    raise SystemExit(run(int(studies), int(budget), float(step)))
