"""Nothing silently wasted: the study's checks of its own results (issue 38.2).

Pure: (study, state) -> findings. No trial runs beside the baseline (``baseline_pending``):
one that failed stops the study before any trial, with its own error; different configs that
gave a bit-identical value, seed repeats that did, and trials that all fail the same way are
said at once (the loop journals each as a ``check`` event, once per code), with the likely
cause and the fix; where the answer is certain the study stops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.loop.outcomes import usable
from autoresearch.spec.study_schema import Study

BASELINE_FAILED = "baseline-failed"
CONFIG_IGNORED = "config-ignored"
SEED_IGNORED = "seed-ignored"
SAME_FAILURE = "same-failure"
# A study stopped for one of these failed: the index and `status` mark it so.
STOPS = (BASELINE_FAILED, CONFIG_IGNORED, SAME_FAILURE)
READS_CONFIG = (
    "does your command read $AIR_CONFIG_FILE or take --key=value flags? With config_as: args"
    " or both (the default) air appends --key=value after the command; argparse needs an"
    " add_argument per key (or parse_known_args plus the two-line bridge in the README)"
)
_VOLATILE = re.compile(r"job-[0-9a-z]+|0x[0-9a-f]+|[0-9a-f]{12,}|\d+(\.\d+)?")


@dataclass(frozen=True)
class Finding:
    """One check that found waste: ``code`` (stable), what was seen, the likely fix."""

    code: str
    message: str
    fix: str
    trials: list[int] = field(default_factory=list)
    stop: bool = False

    def fields(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "fix": self.fix,
            "trials": self.trials,
            "stop": self.stop,
        }


def _ended(t: Trial) -> bool:
    return t.status.is_final() and t.job_done


def _last_line(text: str | None) -> str:
    lines = [x.strip() for x in (text or "").splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


def baseline_failed(state: StudyState) -> Finding | None:
    """The base config's own run failed: every trial runs the same command, so none is."""
    t = state.trials.get(0)
    if t is None or t.source != "baseline" or not _ended(t) or t.status != TrialStatus.FAILED:
        return None
    if t.failure_kind == "infra":  # the machine's fault: the loop relaunches it
        return None
    said = _last_line(t.log_tail)
    why = t.failure or "it failed"
    message = f"the baseline (trial 0, the base config) failed: {why}" + (
        f"; its log ends: {said}" if said and said not in why else ""
    )
    if t.message and t.message not in message:  # air's words: exit code, the sandbox's note
        message += f"; its job says: {t.message}"
    return Finding(
        BASELINE_FAILED,
        message + ". The study stops before any trial: every trial runs the same command.",
        f"run the base config alone (`air logs {t.job_id}` shows its output), fix what it"
        " says, then start the study again",
        [0],
        stop=True,
    )


def _config_key(config: dict[str, Any], seed_key: str) -> str:
    import json

    return json.dumps({k: v for k, v in config.items() if k != seed_key}, sort_keys=True)


def config_ignored(study: Study, state: StudyState) -> Finding | None:
    """Different configs (the seed aside) that gave a bit-identical objective value."""
    seed = study.noise.seed_key
    groups: dict[float, dict[str, list[int]]] = {}
    done = [t for t in state.ordered() if t.status == TrialStatus.SUCCEEDED and usable(t.value)]
    for t in done:
        assert t.value is not None
        groups.setdefault(t.value, {}).setdefault(_config_key(t.config, seed), []).append(t.number)
    for value, configs in groups.items():
        if len(configs) < 2:
            continue
        numbers = sorted(n for ns in configs.values() for n in ns)
        n_configs = len(configs)
        # certain: every trial that succeeded gave this one value, from N different configs
        certain = len(groups) == 1 and n_configs >= max(study.stop_after_same_failures, 2)
        keys = _differing_keys([state.trials[ns[0]].config for ns in configs.values()], seed)
        return Finding(
            CONFIG_IGNORED,
            f"{n_configs} different configs (trials {_list(numbers)}, differing in"
            f" {', '.join(keys) or 'their values'}) gave the bit-identical"
            f" {study.objective.metric} {value!r}: the command does not seem to use its config"
            + (". The study stops: more trials would measure the same run." if certain else ""),
            READS_CONFIG,
            numbers,
            stop=certain and study.stop_after_same_failures > 0,
        )
    return None


def _differing_keys(configs: list[dict[str, Any]], seed: str) -> list[str]:
    keys = sorted({k for c in configs for k in c} - {seed})
    return [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1][:6]


def seed_ignored(study: Study, state: StudyState) -> Finding | None:
    """The base config's runs with different seeds gave a bit-identical value."""
    runs = [t for t in state.ordered() if t.is_noise and _ended(t)]
    values = [t.value for t in runs if t.status == TrialStatus.SUCCEEDED and usable(t.value)]
    if len(values) < 2 or len(set(values)) != 1:
        return None
    seed = study.noise.seed_key
    return Finding(
        SEED_IGNORED,
        f"the base config's {len(values)} runs with different {seed} values gave the"
        f" bit-identical {study.objective.metric} {values[0]!r}: the seed does not reach the"
        " command, so the noise floor of 0 measures nothing",
        f"read the seed from the config key {seed!r} ($AIR_CONFIG_FILE or --{seed}=N) and seed"
        " random, numpy and torch with it (or set noise.seed_key to the key the script reads)",
        [t.number for t in runs],
    )


def _signature(t: Trial) -> str:
    said = _last_line(t.log_tail) or (t.failure or "")
    return _VOLATILE.sub("#", said)


def same_failure(study: Study, state: StudyState) -> Finding | None:
    """Every trial that ended failed, the same way (and none succeeded)."""
    ended = [t for t in state.ordered() if _ended(t) and t.failure_kind != "infra"]
    if any(t.status == TrialStatus.SUCCEEDED for t in ended):
        return None
    failed = [t for t in ended if t.status == TrialStatus.FAILED]
    if len(failed) < 2 or len({_signature(t) for t in failed}) != 1:
        return None
    limit = study.stop_after_same_failures
    stop = limit > 0 and len(failed) >= limit
    first = failed[0]
    said = _last_line(first.log_tail) or first.failure or "the same error"
    return Finding(
        SAME_FAILURE,
        f"trials {_list([t.number for t in failed])} all failed the same way: {said}"
        + (f". The study stops (stop_after_same_failures: {limit})." if stop else ""),
        f"fix what `air logs {first.job_id}` shows (a sandbox refusal names the folder to"
        " grant), then start the study again",
        [t.number for t in failed],
        stop=stop,
    )


def findings(study: Study, state: StudyState) -> list[Finding]:
    """Every check that finds waste now, the baseline's failure first."""
    checks = (
        baseline_failed(state),
        config_ignored(study, state),
        seed_ignored(study, state),
        same_failure(study, state),
    )
    return [f for f in checks if f is not None]


def baseline_pending(state: StudyState) -> bool:
    """Whether the baseline (trial 0) has yet to end: until it has a result, no other trial
    (its noise repeats included) is launched, so a baseline that fails stops the study before
    any trial; after it succeeded, its repeats and the proposer's trials share the slots."""
    t = state.trials.get(0)
    return t is not None and t.source == "baseline" and not t.status.is_final()


def _list(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:8])
    return shown + (f" and {len(numbers) - 8} more" if len(numbers) > 8 else "")
