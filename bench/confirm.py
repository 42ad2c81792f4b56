"""Confirmation before a keep: false keeps and missed improvements, with and without it.

A synthetic objective (minimised) whose true effects are known. Each study measures the base
(a baseline and ``--repeats`` noise repeats, seeds 0..R), then proposes candidates, each a
change to the current best with a true effect drawn from a fixed mixture (in units of the
per-run noise's standard deviation): no effect at all (50%), worse by U(0.25, 2) (20%), better
by U(0.25, 2.5) (30%). A run's value is its config's true mean, plus the seed's effect (shared
by every config run with that seed: what pairing by seed cancels; ``--rho`` of the variance),
plus its own noise. Both arms get the same trial budget (baseline, repeats, candidates and
confirmation runs all count) and see the same candidates in the same order.

The rule is the loop's own: ``decisions.noise_floor_fields`` and ``decisions.decide_trial``
(``judge``) screen each candidate; ``confirm.needed``, ``confirm.runs`` and ``confirm.verdict``
confirm it, exactly as ``watch.TrialWatch._confirmed`` calls them (one trial at a time), over a
``StudyState`` fed the journal events the loop would write.

A false keep is a kept candidate that is truly no better than the best it replaced; a missed
improvement is a truly better candidate that was not kept. Rates are per candidate, pooled
over studies, with 95% bootstrap intervals over studies (percentile, 2,000 resamples).

    python bench/confirm.py [--seeds 500-999] [--budget 40] [--confirm-seeds 2] [--margin 2]

``--seeds N`` runs seeds 0..N-1; ``--seeds A-B`` exactly those (tune on some, check on others).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoresearch.journal.journal import StudyState, Trial
from autoresearch.loop import decisions
from autoresearch.loop.selection import confirm
from autoresearch.study.study import Study, parse_study

RESAMPLES = 2000
GOAL_FALSE_KEEPS = 1 / 3  # confirmed false-keep rate at most a third of the unconfirmed one
GOAL_MISSED = 1.2  # missed improvements at most 1.2x


@dataclass
class Tally:
    """One study's counts for one arm."""

    null: int = 0  # candidates truly no better than the best they were judged against
    false_keeps: int = 0
    better: int = 0  # candidates truly better
    missed: int = 0
    keeps: int = 0
    candidates: int = 0
    unconfirmed: int = 0  # kept unconfirmed: no trial budget left for the re-runs
    final_true: float = 0.0  # the true mean of the study's final best (lower is better)


@dataclass
class World:
    """What a study's runs would measure: the seeds' shared effects, the candidates' effects."""

    seed: int
    rho: float
    seed_effect: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.effects = random.Random(f"effects-{self.seed}")
        self.seeds = random.Random(f"seeds-{self.seed}")
        self.deltas: list[float] = []

    def delta(self, i: int) -> float:
        """The true effect of the study's ``i``-th candidate (the same in both arms)."""
        while len(self.deltas) <= i:
            u = self.effects.random()
            if u < 0.5:
                self.deltas.append(0.0)
            elif u < 0.7:
                self.deltas.append(self.effects.uniform(0.25, 2.0))
            else:
                self.deltas.append(-self.effects.uniform(0.25, 2.5))
        return self.deltas[i]

    def shared(self, seed: int) -> float:
        if seed not in self.seed_effect:
            self.seed_effect[seed] = self.seeds.gauss(0.0, self.rho**0.5)
        return self.seed_effect[seed]


class SimStudy:
    """One study run through the loop's rule; ``confirm_seeds`` 0 is the unconfirmed arm."""

    def __init__(self, study: Study, world: World, arm_seed: int) -> None:
        self.study, self.world = study, world
        self.noise = random.Random(f"noise-{world.seed}-{arm_seed}")
        self.state = StudyState()
        self.truth: dict[int, float] = {}
        self.ts = 0.0

    def emit(self, kind: str, **fields: Any) -> None:
        self.ts += 1.0
        self.state.apply({"event": kind, "ts": self.ts, **fields})

    def run(self, source: str, diff: dict, config: dict, true_mean: float, **extra: Any) -> Trial:
        """Propose, run and finish one trial; its value is drawn from the world."""
        n = self.state.next_number
        self.emit("proposal", trial=n, source=source, diff=diff, config=config, **extra)
        seed = int(config.get(self.study.noise.seed_key, 0))
        own = self.noise.gauss(0.0, (1.0 - self.world.rho) ** 0.5)
        value = true_mean + self.world.shared(seed) + own
        self.emit("finished", trial=n, status="SUCCEEDED", value=value)
        self.truth[n] = true_mean
        return self.state.trials[n]

    def decide(self, t: Trial, d: decisions.Decision) -> None:
        """The ``decision`` event as ``watch.TrialWatch._decision`` writes it."""
        best_trial, best_value = (
            d.best if d.best else (self.state.best_trial, self.state.best_value)
        )
        extra = {"confirmed": d.confirmed} if d.confirmed else {}
        self.emit("decision", trial=t.number, decision=d.decision, value=t.value,
                  best_trial=best_trial, best_value=best_value, **extra)  # fmt: skip

    def confirmed(self, t: Trial, screen: decisions.Decision, tally: Tally) -> decisions.Decision:
        """``watch.TrialWatch._confirmed``, with the re-runs run at once."""
        study, state = self.study, self.state
        if not confirm.needed(t, study, state):
            return screen
        planned = confirm.runs(t, study)
        if len(state.trials) + len(planned) > study.budget.trials:
            tally.unconfirmed += 1
            return screen
        for config, _why in planned:
            c = self.run("confirm", t.diff, config, self.truth[t.number], confirms=t.number)
            self.decide(c, decisions.Decision(c.number, "confirm"))
        found = confirm.verdict(t, study, state)
        assert found is not None  # every re-run has ended
        verdict, stats = found
        best = (t.number, stats["mean"]) if verdict == "keep" else None
        return decisions.Decision(t.number, verdict, best=best, confirmed=stats)

    def play(self) -> Tally:
        study, state, tally = self.study, self.state, Tally()
        base = study.base_config
        self.run("baseline", {}, base, 0.0)
        for k in range(1, study.noise.repeats + 1):
            self.run("noise", {}, {**base, study.noise.seed_key: base.get("seed", 0) + k}, 0.0)
        floor = decisions.noise_floor_fields(study, state)
        assert floor is not None
        self.emit("noise_floor", **floor)
        for t in state.ordered():
            d = decisions.decide_trial(t, study, state, True)
            assert d is not None
            self.decide(t, d)
        while len(state.trials) < study.budget.trials:
            assert state.best_trial is not None
            best_true = self.truth[state.best_trial]
            delta = self.world.delta(tally.candidates)
            diff = {"x": round(tally.candidates / 1000.0, 4)}
            t = self.run("llm", diff, study.config_for(diff), best_true + delta)
            d = decisions.decide_trial(t, study, state, True)
            assert d is not None
            if d.decision == "keep":
                d = self.confirmed(t, d, tally)
            self.decide(t, d)
            kept = d.decision == "keep"
            tally.candidates += 1
            tally.keeps += kept
            if delta >= 0:
                tally.null += 1
                tally.false_keeps += kept
            else:
                tally.better += 1
                tally.missed += not kept
        assert state.best_trial is not None
        tally.final_true = self.truth[state.best_trial]
        return tally


def make_study(args: argparse.Namespace, confirm_seeds: int) -> Study:
    return parse_study(
        {
            "name": "bench-confirm",
            "command": ["true"],
            "base_config": {"x": 0.0, "seed": 0},
            "search_space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
            "objective": {"metric": "loss", "direction": "minimize"},
            "budget": {"trials": args.budget, "concurrency": 1},
            "noise": {
                "repeats": args.repeats,
                "sigmas": args.sigmas,
                "confirm_seeds": confirm_seeds,
                "confirm_margin": args.margin,
                "confirm": args.confirm,
            },
            "gpus_per_trial": 0,
            "proposer": "random",
        }
    )


def rates(tallies: list[Tally]) -> dict[str, float]:
    """Pooled rates over the studies given."""
    s = lambda attr: sum(getattr(t, attr) for t in tallies)  # noqa: E731
    return {
        "false_keep": s("false_keeps") / max(s("null"), 1),
        "missed": s("missed") / max(s("better"), 1),
        "false_share": s("false_keeps") / max(s("keeps"), 1),
        "false_per_study": s("false_keeps") / len(tallies),
        "kept_better": (s("better") - s("missed")) / len(tallies),
        "final_true": statistics.fmean(t.final_true for t in tallies),
        "candidates": s("candidates") / len(tallies),
        "unconfirmed": s("unconfirmed") / len(tallies),
    }


def interval(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]


def bootstrap(
    off: list[Tally], on: list[Tally]
) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]]:
    """95% intervals of each arm's rates and of the two ratios (on / off), resampling the
    studies (the same resample for both arms: they share their candidates)."""
    rng = random.Random(0)
    keys = list(rates(off))
    arms: dict[str, list[float]] = {f"{a}:{k}": [] for a in ("off", "on") for k in keys}
    ratios: dict[str, list[float]] = {"false_keep": [], "missed": []}
    idx = list(range(len(off)))
    for _ in range(RESAMPLES):
        pick = rng.choices(idx, k=len(idx))
        r_off, r_on = rates([off[i] for i in pick]), rates([on[i] for i in pick])
        for k in keys:
            arms[f"off:{k}"].append(r_off[k])
            arms[f"on:{k}"].append(r_on[k])
        for k in ratios:
            ratios[k].append(r_on[k] / r_off[k] if r_off[k] else float("inf"))
    return {k: interval(v) for k, v in arms.items()}, {k: interval(v) for k, v in ratios.items()}


def parse_seeds(text: str) -> list[int]:
    """``20`` is seeds 0..19; ``10-19`` is 10..19; ``1,4,7`` is those three."""
    if "-" not in text and "," not in text:
        return list(range(int(text)))
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="500-999", help="study seeds (default: the check range)")
    p.add_argument("--budget", type=int, default=40, help="trials per study, runs of all kinds")
    p.add_argument("--repeats", type=int, default=3, help="noise repeats of the base config")
    p.add_argument(
        "--sigmas", type=float, default=None, help="noise.sigmas (default: the schema's)"
    )
    p.add_argument(
        "--margin", type=float, default=None, help="noise.confirm_margin (default: ditto)"
    )
    p.add_argument("--confirm-seeds", type=int, default=2, help="noise.confirm_seeds of the arm")
    p.add_argument("--confirm", choices=["margin", "always"], default="margin")
    p.add_argument("--rho", type=float, default=0.5, help="share of the noise a seed fixes")
    args = p.parse_args(argv)
    defaults = parse_study(
        {
            "name": "d",
            "command": ["true"],
            "search_space": {"x": {"type": "float", "low": 0, "high": 1}},
            "objective": {"metric": "loss"},
        }  # fmt: skip
    ).noise
    args.sigmas = defaults.sigmas if args.sigmas is None else args.sigmas
    args.margin = defaults.confirm_margin if args.margin is None else args.margin
    seeds = parse_seeds(args.seeds)
    started = time.monotonic()
    study_off, study_on = make_study(args, 0), make_study(args, args.confirm_seeds)
    off: list[Tally] = []
    on: list[Tally] = []
    for seed in seeds:
        world = World(seed, args.rho)
        off.append(SimStudy(study_off, world, 0).play())
        on.append(SimStudy(study_on, world, 1).play())
    r_off, r_on = rates(off), rates(on)
    arm_ci, ratio_ci = bootstrap(off, on)
    print(
        f"{len(seeds)} studies (seeds {args.seeds}), {args.budget} trials each, repeats"
        f" {args.repeats}, sigmas {args.sigmas:g}, confirm_seeds {args.confirm_seeds},"
        f" margin {args.margin:g}, confirm {args.confirm}, rho {args.rho:g}"
    )
    print(f"{'':24}{'no confirmation':>28}{'confirmation':>28}")
    rows = [
        ("false-keep rate", "false_keep"),
        ("missed improvements", "missed"),
        ("false share of keeps", "false_share"),
        ("false keeps per study", "false_per_study"),
        ("improvements kept/study", "kept_better"),
        ("final best, true mean", "final_true"),
        ("candidates per study", "candidates"),
        ("kept unconfirmed/study", "unconfirmed"),
    ]
    for label, k in rows:
        cells = []
        for arm, r in (("off", r_off), ("on", r_on)):
            lo, hi = arm_ci[f"{arm}:{k}"]
            cells.append(f"{r[k]:.4f} [{lo:.4f}, {hi:.4f}]")
        print(f"{label:24}{cells[0]:>28}{cells[1]:>28}")
    for k, goal, label in (
        ("false_keep", GOAL_FALSE_KEEPS, "false keeps"),
        ("missed", GOAL_MISSED, "missed improvements"),
    ):
        ratio = r_on[k] / r_off[k] if r_off[k] else float("inf")
        lo, hi = ratio_ci[k]
        verdict = "meets" if ratio <= goal else "MISSES"
        print(f"{label}: confirmation / none = {ratio:.3f} [{lo:.3f}, {hi:.3f}]"
              f" (goal <= {goal:.3g}): {verdict}")  # fmt: skip
    print(f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
