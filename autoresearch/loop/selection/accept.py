"""The acceptance rules (pure): when a trial's value beats the best enough to be kept.

``noise-floor`` (the default): by more than the floor (``noise.sigmas`` x the baseline's seed
std). ``k-sigma(k)``: by more than k x that std. ``paired-test(alpha)``: a one-sided test at
level alpha; a single screening run against the best is a z test on the difference of two
draws (std x sqrt 2), a confirmed candidate's runs a paired t test on the seeds both share.
Every decision the loop journals names the rule it used (``rule``).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

from air_skills.vocabulary import Direction, better

DEFAULT = "noise-floor"
_RULE = re.compile(r"^(noise-floor|k-sigma|paired-test)(?:\((.+)\))?$")


@dataclass(frozen=True)
class Rule:
    kind: str  # noise-floor | k-sigma | paired-test
    param: float | None = None  # k, or alpha

    def __str__(self) -> str:
        return self.kind if self.param is None else f"{self.kind}({self.param:g})"


def parse(text: str | None) -> Rule:
    """The rule a study's ``accept`` names (the schema has checked its form)."""
    m = _RULE.match((text or DEFAULT).strip())
    if m is None:
        raise ValueError(f"unknown acceptance rule {text!r}")
    return Rule(m.group(1), float(m.group(2)) if m.group(2) else None)


def _z(alpha: float) -> float:
    """The one-sided normal quantile z with P(Z > z) = alpha."""
    return statistics.NormalDist().inv_cdf(1.0 - alpha)


def _t(alpha: float, df: int) -> float:
    """The one-sided Student t quantile, by a Cornish-Fisher expansion of z (within 1% for
    df >= 3, a little conservative below): no SciPy in the loop."""
    z = _z(alpha)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def margin(rule: Rule, std: float, floor: float) -> float:
    """How much a single run must beat the best's value by."""
    if rule.kind == "k-sigma":
        return (rule.param or 0.0) * std
    if rule.kind == "paired-test":
        return _z(rule.param or 0.05) * std * math.sqrt(2.0)
    return floor


def beats(
    rule: Rule, value: float, best: float | None, std: float, floor: float, direction: Direction
) -> bool:
    """Whether one run's ``value`` beats ``best`` under ``rule`` (no best yet: it does)."""
    if best is None:
        return True
    return better(value, best, direction) and abs(value - best) > margin(rule, std, floor)


def beats_paired(
    rule: Rule,
    cand: list[float],
    base: list[float],
    std: float,
    floor: float,
    direction: Direction,
) -> bool:
    """Whether runs ``cand`` beat ``base`` (paired by seed when equally long): the means by
    the rule's margin, or, for paired-test with two pairs or more, a paired t test."""
    if not cand or not base:
        return False
    mean_c, mean_b = statistics.fmean(cand), statistics.fmean(base)
    if not better(mean_c, mean_b, direction):
        return False
    if rule.kind == "paired-test" and len(cand) == len(base) and len(cand) >= 2:
        sign = -1.0 if direction == "minimize" else 1.0
        diffs = [sign * (c - b) for c, b in zip(cand, base, strict=True)]
        sd = statistics.stdev(diffs)
        if sd == 0.0:
            return statistics.fmean(diffs) > 0
        t = statistics.fmean(diffs) / (sd / math.sqrt(len(diffs)))
        return t > _t(rule.param or 0.05, len(diffs) - 1)
    if rule.kind == "paired-test":  # means of n runs: the difference's std shrinks by sqrt n
        n = min(len(cand), len(base))
        return abs(mean_c - mean_b) > _z(rule.param or 0.05) * std * math.sqrt(2.0 / n)
    return abs(mean_c - mean_b) > margin(rule, std, floor)
