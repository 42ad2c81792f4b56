"""The overfit gap: how much of a study's validation gain holds on data the search never saw,
per acceptance rule, with and without the final selection by re-evaluation.

A synthetic task whose truth is known (minimised). A config is a point in [0, 1]^2; its true
loss is ``SCALE x |x - x*|^2`` (0 at the optimum). A run's validation value is the truth, plus
the validation split's fixed bias for that config (drawn once per config, ``--bias`` standard
deviations: re-running seeds never removes it), plus the seed's noise (1 standard deviation:
the unit of every figure). A run's held-out value is the truth plus seed noise; the held-out
figures below are its expectation (the truth), so they carry no noise of their own. The
proposer climbs: each trial perturbs the current best (``--step``), one in four is a fresh
random point.

The rules are the loop's own, driven in-process on a ``StudyState`` fed the journal events the
loop would write (as bench/confirm.py does): ``decisions.noise_floor_fields`` and
``decisions.decide_trial`` (``accept`` in the study) keep or discard each trial;
``final.finalists``, ``final.seeds``, ``final.plan`` and ``final.summary`` make the final
selection. Arms: ``plain`` keeps any improvement (keep-if-better, no noise repeats), the
three ``accept`` rules with ``noise.repeats: 2``; each with and without the final
re-evaluation (top 3, 3 seeds, the baseline beside them), at the same search budget (the
baseline and its repeats count), the re-runs on top.

Per study: the reported validation gain (baseline's value minus the winner's: the search's
values without the final, the re-runs' means with it), the held-out gain (the same for the
truth), the gap (validation gain minus held-out gain) and the regret (the winner's truth minus
the optimum's, 0). Means over studies with 95% bootstrap intervals (2,000 resamples).

    python bench/overfit.py [--studies 200] [--budget 40] [--bias 0.3]
    python bench/overfit.py --task mlp [--studies 5] [--budget 16]   # examples/mlp, real runs
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoresearch.journal.journal import StudyState
from autoresearch.loop import decisions
from autoresearch.loop.selection import final
from autoresearch.study.study import Study, parse_study

SCALE = 8.0  # the base config (0.9, 0.9) is ~4.5 noise standard deviations above the optimum
OPTIMUM = (0.3, 0.6)
RESAMPLES = 2000
GOAL_GAP = 0.25  # the final re-evaluation with the default rule: gap <= 1/4 of plain's
ARMS = ("plain", "noise-floor", "k-sigma(1)", "paired-test(0.05)")


@dataclass
class Result:
    val_gain: float
    held_gain: float
    regret: float
    trials: int  # runs in all, re-runs included

    @property
    def gap(self) -> float:
        return self.val_gain - self.held_gain


def truth(x: tuple[float, float]) -> float:
    return SCALE * ((x[0] - OPTIMUM[0]) ** 2 + (x[1] - OPTIMUM[1]) ** 2)


class World:
    """One study's task: the split's bias per config and the seeds' noise."""

    base = (0.9, 0.9)  # the base config's point

    def __init__(self, seed: int, bias_sd: float) -> None:
        self.seed, self.bias_sd = seed, bias_sd
        self.bias: dict[tuple[float, float], float] = {}
        self.noise = random.Random(f"noise-{seed}")

    def split_bias(self, x: tuple[float, float]) -> float:
        if x not in self.bias:
            self.bias[x] = random.Random(f"bias-{self.seed}-{x}").gauss(0.0, self.bias_sd)
        return self.bias[x]

    def val(self, x: tuple[float, float], seed: int, trial: int) -> float:
        return truth(x) + self.split_bias(x) + self.noise.gauss(0.0, 1.0)


def make_study(
    arm: str, budget: int, with_final: bool, base: tuple[float, float] = World.base
) -> Study:
    return parse_study(
        {
            "name": "bench-overfit",
            "command": ["true"],
            "base_config": {"x0": base[0], "x1": base[1], "seed": 0},
            "search_space": {
                "x0": {"type": "float", "low": 0.0, "high": 1.0},
                "x1": {"type": "float", "low": 0.0, "high": 1.0},
            },
            "objective": {"metric": "loss", "direction": "minimize"},
            "budget": {"trials": budget, "concurrency": 1},
            "noise": {"repeats": 0 if arm == "plain" else 2, "sigmas": 2.0},
            "accept": "noise-floor" if arm == "plain" else arm,
            "final": {"top_k": 3, "seeds": 3} if with_final else False,
            "gpus_per_trial": 0,
            "proposer": "random",
        }
    )


class SimStudy:
    def __init__(self, study: Study, world: World, seed: int, step: float) -> None:
        self.study, self.world, self.step = study, world, step
        self.propose = random.Random(f"propose-{seed}")
        self.state = StudyState()
        self.points: dict[int, tuple[float, float]] = {}
        self.ts = 0.0

    def emit(self, kind: str, **fields: Any) -> None:
        self.ts += 1.0
        self.state.apply({"event": kind, "ts": self.ts, **fields})

    def run(self, source: str, x: tuple[float, float], seed: int, **extra: Any) -> int:
        n = self.state.next_number
        config = {"x0": x[0], "x1": x[1], "seed": seed}
        diff = {} if source in ("baseline", "noise") else {"x0": x[0], "x1": x[1]}
        self.emit("proposal", trial=n, source=source, diff=diff, config=config, **extra)
        self.emit("launched", trial=n, job_id=f"j{n}")
        value = self.world.val(x, seed, n)
        self.emit("finished", trial=n, status="SUCCEEDED", value=value)
        self.points[n] = x
        return n

    def decide(self, n: int) -> None:
        t = self.state.trials[n]
        d = decisions.decide_trial(t, self.study, self.state, True)
        assert d is not None
        best_trial, best_value = d.best if d.best else (self.state.best_trial,
                                                        self.state.best_value)  # fmt: skip
        self.emit("decision", trial=n, decision=d.decision, value=t.value,
                  best_trial=best_trial, best_value=best_value)  # fmt: skip

    def candidate(self) -> tuple[float, float]:
        if self.propose.random() < 0.25:
            return (round(self.propose.random(), 6), round(self.propose.random(), 6))
        bx = self.points[self.state.best_trial or 0]
        clip = lambda v: round(min(1.0, max(0.0, v)), 6)  # noqa: E731
        return (clip(bx[0] + self.propose.gauss(0, self.step)),
                clip(bx[1] + self.propose.gauss(0, self.step)))  # fmt: skip

    def play(self) -> Result:
        """The study to its end: the final re-evaluation's result when the study has one;
        ``self.searched`` the result of the search alone (its kept best, its own values)."""
        study, state = self.study, self.state
        base = self.world.base
        self.run("baseline", base, 0)
        for k in range(1, study.noise.repeats + 1):
            self.run("noise", base, k)
        floor = decisions.noise_floor_fields(study, state)
        if floor is not None:
            self.emit("noise_floor", **floor)
        for t in state.ordered():
            self.decide(t.number)
        while state.search_trials < study.budget.trials:
            self.decide(self.run("tpe", self.candidate(), 0))
        base_val = state.trials[0].value if not state.noise_values else statistics.fmean(
            state.noise_values)  # fmt: skip
        winner = state.best_trial or 0
        win_val = float(state.best_value if state.best_value is not None else base_val)
        self.searched = self.result(winner, base_val, win_val, final_runs=False)
        if study.final_runs is None:
            return self.searched
        numbers = final.finalists(study, state)
        if numbers:
            seeds = final.seeds(study)
            self.emit("final_started", finalists=numbers, seeds=seeds, reason="budget")
            for fields in final.plan(study, state, numbers, seeds):
                x = (fields["config"]["x0"], fields["config"]["x1"])
                self.run(fields.pop("source"), x, fields["config"]["seed"],
                         final_of=fields["final_of"])  # fmt: skip
            got = final.summary(study, state)
            self.emit("final_done", **got)
            by = {c["trial"]: c for c in got["configs"]}
            if got["winner"] is not None:
                winner = got["winner"]
                win_val = by[winner]["val"]["mean"]
                base_val = by[0]["val"]["mean"]
        return self.result(winner, base_val, win_val, final_runs=True)

    def result(self, winner: int, base_val: float, win_val: float, final_runs: bool) -> Result:
        """The figures of a study that reports ``winner`` (the held-out ones: the truth)."""
        x = self.points[winner]
        return Result(
            val_gain=base_val - win_val,
            held_gain=truth(self.world.base) - truth(x),
            regret=truth(x),
            trials=len(self.state.trials),
        )


def interval(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]


def boot(results: list[Result], attr: str, rng: random.Random) -> tuple[float, float]:
    idx = range(len(results))
    means = []
    for _ in range(RESAMPLES):
        pick = rng.choices(idx, k=len(results))
        means.append(statistics.fmean(getattr(results[i], attr) for i in pick))
    return interval(means)


def ratio_interval(a: list[Result], b: list[Result], rng: random.Random) -> tuple[float, float]:
    """95% interval of mean gap(a) / mean gap(b), the same studies resampled for both."""
    idx = range(len(a))
    out = []
    for _ in range(RESAMPLES):
        pick = rng.choices(idx, k=len(a))
        gb = statistics.fmean(b[i].gap for i in pick)
        out.append(statistics.fmean(a[i].gap for i in pick) / gb if gb else float("inf"))
    return interval(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    task_help = "mlp: examples/mlp's real training runs (bench/overfit_mlp.py)"
    p.add_argument("--task", choices=("synthetic", "mlp"), default="synthetic", help=task_help)
    p.add_argument("--studies", type=int, default=None, help="studies (seeds) per arm: 200; mlp 5")
    p.add_argument("--budget", type=int, default=None, help="search trials per study: 40; mlp 16")
    p.add_argument("--bias", type=float, default=0.3, help="split bias sd, in noise sds")
    p.add_argument("--step", type=float, default=0.15, help="the proposer's step")
    args = p.parse_args(argv)
    if args.task == "mlp":  # a script of its own: it imports this one's parts
        mlp = [str(Path(__file__).with_name("overfit_mlp.py")), str(args.studies or 5)]
        return subprocess.call([sys.executable, *mlp, str(args.budget or 16), str(args.step)])
    args.studies, args.budget = args.studies or 200, args.budget or 40
    started = time.perf_counter()
    results: dict[tuple[str, bool], list[Result]] = {}
    for arm in ARMS:
        for with_final in (False, True):
            study = make_study(arm, args.budget, with_final)
            results[(arm, with_final)] = [
                SimStudy(study, World(s, args.bias), s, args.step).play()
                for s in range(args.studies)
            ]
    took = time.perf_counter() - started
    print(f"{args.studies} studies x {args.budget} search trials per arm; split bias sd"
          f" {args.bias:g}, seed noise sd 1 (the unit); {took:.1f} s")  # fmt: skip
    return report(results, regret=True)


def report(results: dict[tuple[str, bool], list[Result]], regret: bool) -> int:
    """The table, and the goal's row: the gap of noise-floor with the final re-evaluation
    against keep-if-better's without, and no worse regret (held-out gain where no truth)."""
    rng = random.Random(0)
    print()
    print("| rule | final re-evaluation | runs | val gain | held-out gain | gap | regret |")
    print("|---|---|---|---|---|---|---|")
    for (arm, with_final), rs in results.items():
        cells = []
        for attr in ("val_gain", "held_gain", "gap", "regret")[: 4 if regret else 3]:
            mean = statistics.fmean(getattr(r, attr) for r in rs)
            lo, hi = boot(rs, attr, rng)
            cells.append(f"{mean:.3f} [{lo:.3f}, {hi:.3f}]" if not regret else
                         f"{mean:.2f} [{lo:.2f}, {hi:.2f}]")  # fmt: skip
        cells += [] if regret else ["n/a"]
        runs = statistics.fmean(r.trials for r in rs)
        name = "keep-if-better" if arm == "plain" else arm
        print(f"| {name} | {'yes' if with_final else 'no'} | {runs:.0f} | " + " | ".join(cells)
              + " |")  # fmt: skip
    plain, best = results[("plain", False)], results[("noise-floor", True)]
    g_plain = statistics.fmean(r.gap for r in plain)
    g_best = statistics.fmean(r.gap for r in best)
    lo, hi = ratio_interval(best, plain, rng)
    attr, what = ("regret", "regret") if regret else ("held_gain", "held-out gain")
    r_plain = statistics.fmean(getattr(r, attr) for r in plain)
    r_best = statistics.fmean(getattr(r, attr) for r in best)
    print()
    p_lo, p_hi = boot(plain, "gap", rng)
    if p_lo <= 0.0 <= p_hi:  # no gap to cut: a ratio of two noises says nothing
        print(f"keep-if-better's gap {g_plain:.3g} [{p_lo:.3g}, {p_hi:.3g}] is within its noise"
              f" of 0: no gap to cut here (noise-floor + final: {g_best:.3g});"
              f" {what} {r_best:.3g} vs {r_plain:.3g}")  # fmt: skip
        return 0
    print(f"gap, noise-floor + final / keep-if-better: {g_best / g_plain:.3f} [{lo:.3f}, {hi:.3f}]"
          f" (goal <= {GOAL_GAP}); {what} {r_best:.3g} vs {r_plain:.3g}")  # fmt: skip
    no_worse = r_best <= r_plain if regret else r_best >= r_plain
    ok = g_best <= GOAL_GAP * g_plain and no_worse
    print("goal met" if ok else "goal NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
