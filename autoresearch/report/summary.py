"""The compact JSON view of a study that ``get_study`` returns: state, best, running, budgets."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from autoresearch.journal.best import lowest_seen
from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.report.cost import study_cost, study_throughput, trial_cost, trial_gpus
from autoresearch.report.hardware import hardware_note
from autoresearch.study.folder import REPORT_FILE, loop_alive
from autoresearch.study.study import Study

# The MCP resource that serves a trial's full patch (``api.trial_patch``). The study folder
# has slashes, so it travels URL-encoded in one path segment.
PATCH_RESOURCE = "air://studies/{study}/trials/{trial}/patch"


def patch_uri(study_dir: Path | str, trial: int) -> str:
    """The resource URI of trial ``trial``'s patch in the study folder ``study_dir``."""
    return PATCH_RESOURCE.format(study=quote(str(study_dir), safe=""), trial=trial)


def best_trial(state: StudyState) -> Trial | None:
    """The study's best trial so far; None before one succeeds."""
    return state.trials.get(state.best_trial) if state.best_trial is not None else None


def best_label(state: StudyState, best: Trial) -> str:
    """What the best value is: ``0.42914, mean of 3 runs (trial 0 and its repeats)`` or
    ``0.43327, trial 1's run``, so that it matches a row the reader can find."""
    value = state.best_value
    if value is None:
        return "no value yet"
    shown = f"{value:.5g}"
    if best.value is not None and math.isclose(value, best.value, rel_tol=1e-12):
        return f"{shown}, trial {best.number}'s run"
    confirmed = best.confirmed or {}
    if confirmed.get("mean") is not None and math.isclose(value, confirmed["mean"]):
        n = confirmed.get("n")
        return f"{shown}, mean of {n} runs (trial {best.number} and its confirmations)"
    if best.is_noise:
        n = len(state.noise_values) or 1
        return f"{shown}, mean of {n} runs (trial {best.number} and its repeats)"
    return f"{shown}, trial {best.number} (its run: {best.value!r})"


def best_fields(state: StudyState, best: Trial) -> dict[str, Any]:
    """What every view of the best trial shows: its number, value (and what that value is),
    diff, job and MLflow run."""
    return {
        "trial": best.number,
        "value": state.best_value,
        "label": best_label(state, best),
        "diff": best.diff,
        "job_id": best.job_id,
        "run_id": best.run_id,
    }


def _trial_brief(t: Any) -> dict[str, Any]:
    return {
        "trial": t.number,
        "diff": t.diff,
        "status": t.status.value,
        "value": t.value,
        "job_id": t.job_id,
        "source": t.source,
        "decision": _decision(t),
        "cost_usd": trial_cost(t)["usd"],
        "outputs": trial_outputs(t),
    }


def trial_outputs(t: Any) -> list[str]:
    """The trial job's checkpoint folder and what it wrote in its code view (./runs, ...)."""
    if not t.job_id:
        return []
    from air_skills.home import default_home
    from air_skills.runtime.code.job_outputs import outputs

    return outputs(default_home() / "jobs" / t.job_id)


def budget_warning(study: Study) -> list[str]:
    """Why the trials budget leaves no search (the baseline and its repeats take it all)."""
    fixed = 1 + study.noise.repeats  # the baseline and the runs that measure the noise
    limit = study.budget.trials
    if limit is None or limit > fixed:
        return []
    return [
        f"budget.trials={limit} holds only the baseline and its {study.noise.repeats}"
        f" repeat(s): no search trial will run; raise budget.trials above {fixed}"
        " (or lower noise.repeats)"
    ]


def spent_warning(limit: int | None, state: StudyState) -> list[str]:
    """A trials budget already spent (a resumed study, a lowered budget): said, never a silent
    finish (issue 39.7)."""
    if limit is None or state.search_trials < limit:
        return []
    return [
        f"budget.trials is spent ({state.search_trials} of {limit}): no more search trial will"
        " run; raise it with steer_study(budget={trials: N}) or `autoresearch steer --budget`"
    ]


def class_warning(study: Study, state: StudyState) -> list[str]:
    """The baseline ran on another hardware class than the trials will (a prior or base job
    on GPUs, trials on CPU slots, or the other way): said at start, with the key that decides
    it, before every trial is marked incomparable (issue 39.6)."""
    from air_skills.gpu.hardware import comparable_class, gpu_class
    from autoresearch.report.hardware import trial_class

    base = state.trials.get(0)
    if base is None or study.hardware != "same" or study.gpus_per_trial is None:
        return []
    theirs = comparable_class(trial_class(base))
    if not theirs:
        return []
    if study.gpus_per_trial == 0:
        mine = "CPU"
    else:
        from air_skills.gpu.providers import provider

        names = sorted({gpu_class(d.name, d.memory_mb) for d in provider().devices()})
        count = f"{study.gpus_per_trial}x " if study.gpus_per_trial > 1 else ""
        mine = "CPU" if names in ([], ["CPU"]) else count + " + ".join(names)
    if comparable_class(mine) == theirs:
        return []
    return [
        f"the baseline (trial 0) ran on {theirs}; trials with gpus_per_trial="
        f"{study.gpus_per_trial} run on {mine}: with hardware: same each would be incomparable;"
        " set gpus_per_trial to match the baseline, or hardware: any"
    ]


# What a final trial's decision means, for an agent that reads get_study's `recent`.
DECISIONS = {
    "keep": "keep: the new best",
    "discard": "discard: within the noise floor of the best, or worse",
    "incomparable": "incomparable: ran on another hardware class than the baseline, so not"
    " judged (study `hardware: same`; `hardware: any` judges it; `gpus_per_trial` decides"
    " where trials run)",
    "baseline": "baseline: the reference the others are judged against",
    "noise": "noise: a repeat of the baseline that measures the noise floor",
    "seed-ignored": "seed-ignored: its runs with different seeds gave the identical value, so"
    " the trial does not use the seed (a fixed one?): never kept on that evidence",
}


def _decision(t: Any) -> str | None:
    """The trial's decision in words: keep, discard (within the noise floor), pruned, ..."""
    if t.status == TrialStatus.PRUNED:
        return f"pruned: {t.failure}" if t.failure else "pruned: stopped early"
    if t.decision:
        return DECISIONS.get(t.decision, t.decision)
    if t.status.is_final() and t.status != TrialStatus.SUCCEEDED:
        return t.status.value.lower() + (f": {t.failure}" if t.failure else "")
    return None


def _hw(trials: list[Trial]) -> list[str]:
    """The study's finished trials ran on different hardware classes: say so."""
    note = hardware_note(trials)
    return [f"{note}: values from different hardware are compared"] if note else []


def _noise_warning(state: StudyState) -> list[str]:
    n = len(state.noise_values)
    if 0 < n < 3:
        return [f"the noise floor comes from {n} sample(s): treat small gains as noise"]
    return []


def summarize(study_dir: Path, study: Study, state: StudyState) -> dict[str, Any]:
    """The compact JSON view of a study: best, running, counts, budgets spent and left."""
    now = time.time()
    alive = loop_alive(study_dir)
    if alive:
        phase = "running"
    elif state.stopped:
        # a study stopped by its own checks (loop/waste.py STOPS) failed too
        failed = ("error", "baseline-failed", "config-ignored", "same-failure")
        # and a study none of whose trials succeeded: never the green "finished" of a good one
        ended = [t.status for t in state.trials.values() if t.status.is_final()]
        none_ok = TrialStatus.FAILED in ended and TrialStatus.SUCCEEDED not in ended
        phase = "failed" if state.stopped.get("reason") in failed or none_ok else "finished"
    else:
        phase = "interrupted"
    trials = state.ordered()
    counts = {s.value.lower(): sum(1 for t in trials if t.status == s) for s in TrialStatus}
    b = study.budget.model_copy(update=state.steering.budget)  # as steer_study set it
    wall_min = (state.wall_s_now(now) if alive else state.wall_s) / 60
    best = best_trial(state)
    out: dict[str, Any] = {
        "name": study.name,
        "study_dir": str(study_dir),
        "state": phase,
        "pid": alive.get("pid") if alive else None,
        "stop_reason": state.stopped.get("reason") if state.stopped else None,
        "stop_detail": state.stopped.get("detail") if state.stopped else None,
        "objective": {"metric": study.objective.metric, "direction": study.objective.direction},
        "proposer": study.proposer.type,
        "trials": {"total": len(trials), **counts},
        "best": None
        if best is None
        else {
            **best_fields(state, best),
            "reason": best.rationale[:300] or best.source,
            "outputs": trial_outputs(best),  # its checkpoint folder: where the winner's weights are
            **best_code(study_dir, state),
        },
        # the lowest single value seen, when another trial's than the kept best's, and why
        # it was not kept (autoresearch/journal/best.py: one meaning of "best" everywhere)
        "lowest_seen": lowest_seen(trials, state.best_trial, study.objective.direction),
        # steer_study's requests (the newest five), what it pinned and what waits in its queue
        "steering": {
            "requests": [state.steering.line(e) for e in state.steering.log[-5:]],
            "pins": state.steering.pins,
            "queued": len(state.steering.queue),
        }
        if state.steering.log
        else None,
        "running": [
            {**_trial_brief(t), "steps": t.steps}
            for t in trials
            if t.status in (TrialStatus.RUNNING, TrialStatus.PROPOSED)
        ],
        "noise": {
            "repeats": study.noise.repeats,
            "std": state.noise_std,
            # no floor at all from zero runs (never "0" from nothing)
            "floor": state.noise_floor if state.noise_values else None,
            "values": state.noise_values,
        },
        "budget": {
            "trials": {"used": state.search_trials, "limit": b.trials},
            # the final re-evaluation's runs: a budget of their own (study key `final`)
            **({"final": fb} if (fb := final_budget(study, state)) else {}),
            "concurrency": b.concurrency,
            "wall_time_min": {"used": round(wall_min, 3), "limit": b.wall_time_min},
            "gpu_hours": {"used": round(state.gpu_hours(now), 5), "limit": b.gpu_hours},
            "llm_usd": {
                "used": round(state.llm_usd, 6),
                "limit": b.llm_usd,
                "calls": state.llm_calls,
                "input_tokens": state.llm_input_tokens,
                "output_tokens": state.llm_output_tokens,
            },
        },
        # with trials per GPU-hour of the study's GPUs and the fraction of that time trials ran
        "cost": {
            **study_cost(state, now),
            **study_throughput(
                state, wall_min * 60, b.concurrency * trial_gpus(study.gpus_per_trial, state), now
            ),
        },
        "recent": [_trial_brief(t) for t in [t for t in trials if t.status.is_final()][-5:]],
        "invalid_proposals": state.invalid_proposals,
        "fallbacks": state.fallbacks,
        # the study's checks of its own results first (loop/waste.py), each with its fix
        "checks": state.checks,
        "warnings": [f"[{c['code']}] {c['message']} Fix: {c['fix']}" for c in state.checks]
        + list(
            dict.fromkeys(
                budget_warning(study)
                + (spent_warning(b.trials, state) if phase != "finished" else [])
                + class_warning(study, state)
                + state.warnings
                + _noise_warning(state)
                + _hw(trials)
            )
        )[-5:],
        "accept": study.accept,
        "final": final_view(study, state),
        "last_error": state.last_error,
        "report": str(study_dir / REPORT_FILE) if (study_dir / REPORT_FILE).exists() else None,
    }
    if phase == "interrupted":
        out["hint"] = f"no loop is running: resume with `autoresearch run {study_dir} --resume`"
    return out


def best_code(study_dir: Path, state: StudyState) -> dict[str, Any]:
    """The best trial's patch in brief (files, +/- lines) and where its full text is."""
    from autoresearch.code.code_check import chain_of
    from autoresearch.code.code_diff import summarize

    best = best_trial(state)
    if best is None or state.code_base is None:
        return {}
    chain = chain_of(state.trials, best.number)
    summary = summarize("".join(chain)) if chain else None
    return {
        "parent": best.parent,
        "patch_summary": summary,
        "patch_resource": patch_uri(study_dir, best.number) if chain else None,
    }


def final_budget(study: Study, state: StudyState) -> dict[str, Any] | None:
    """The final re-evaluation's runs: planned and made (None when the study makes none)."""
    settings = study.final_runs
    if settings is None:
        return None
    made = sum(1 for t in state.trials.values() if t.source == "final")
    planned = (1 + len((state.final_started or {}).get("finalists", []))) * settings.seeds
    return {"used": made, "planned": planned if state.final_started else None,
            "top_k": settings.top_k, "seeds": settings.seeds}  # fmt: skip


def final_view(study: Study, state: StudyState) -> dict[str, Any] | None:
    """The final selection and the overfit gap (``final_done``), or where it stands."""
    if state.final_done is not None:
        return {"state": "done", **state.final_done}
    if state.final_started is not None:
        return {"state": "running", "finalists": state.final_started.get("finalists"),
                "seeds": state.final_started.get("seeds")}  # fmt: skip
    if study.final_runs is None:
        return None
    return {"state": "after the search", "top_k": study.final_runs.top_k,
            "seeds": study.final_runs.seeds}  # fmt: skip
