"""What the loop launches: the base config's runs, a trial's job spec, the proposer's request."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from autoresearch.journal.journal import StudyState, Trial
from autoresearch.loop import budgets
from autoresearch.proposers import ProposalRequest
from autoresearch.spec.study_schema import Study


def trial_command(command: list[str]) -> list[str]:
    """The study's argv, with a bare ``python``/``python3`` taken as this interpreter: the one
    that has the study's packages, even when its virtualenv is not on PATH."""
    if command and command[0] in ("python", "python3"):
        return [sys.executable, *command[1:]]
    return list(command)


def noise_repeat(study: Study, k: int) -> tuple[dict[str, Any], str]:
    """(config, rationale) of the ``k``-th repeat of the base config, with its own seed."""
    seed_key = study.noise.seed_key
    seed = study.base_config.get(seed_key, 0)
    seed = seed + k if isinstance(seed, int) else k
    return {
        **study.base_config,
        seed_key: seed,
    }, f"repeat {k} of the base config, {seed_key}={seed}"


def trial_spec(study: Study, state: StudyState, t: Trial, gpus: int) -> Any:
    """The ``JobSpec`` of trial ``t``'s next attempt; the idempotency key names the attempt, so
    a resumed loop that launches it again gets the same job."""
    from air_skills.models import JobSpec

    tags = {
        "autoresearch.study.study": study.name,
        "autoresearch.study_id": str(state.study_id),
        "autoresearch.trial": str(t.number),
        "autoresearch.source": t.source,
    }
    if state.parent_run_id:
        tags["mlflow.parentRunId"] = state.parent_run_id
    held_out = eval_split(study, t) == "test"
    return JobSpec(
        command=trial_command(study.command),
        name=f"{study.name}-t{t.number}",
        workdir=study.workdir,
        config=t.config,
        config_as=study.config_as,
        gpus=gpus,
        procs=study.procs_per_trial,
        experiment=study.experiment_name,
        tags=tags,
        env={**study.env, "AIR_EVAL_SPLIT": eval_split(study, t)},
        timeout_min=study.trial_timeout_min,
        max_retries=0,
        idempotency_key=f"ar-{state.study_id}-t{t.number}-a{t.attempt + 1}",
        project=study.project,
        # the held-out inputs: bound into the final re-evaluation's runs, masked in the search's
        data=[*study.data, *study.holdout_data] if held_out else study.data,
        hidden=[] if held_out else holdout_paths(study),
        image=study.image,
        network=study.network,
        writable=list(study.writable),
        **({"backend": study.backend} if study.backend else {}),
        **({"sandbox": mode} if (mode := study_sandbox(study)) else {}),
    )


def eval_split(study: Study, t: Trial) -> str:
    """``AIR_EVAL_SPLIT`` of trial ``t``: ``test`` only in a final re-evaluation run of a study
    with a holdout (the held-out metric exists only after the search), else ``val``."""
    return "test" if t.source == "final" and study.objective.holdout is not None else "val"


def holdout_paths(study: Study) -> list[str]:
    """The held-out inputs' real paths (relative ones against the workdir)."""
    return [os.path.realpath(os.path.join(study.workdir, d.path)) for d in study.holdout_data]


def study_sandbox(study: Study) -> str | None:
    """The trials' sandbox: as the study says; else `on` for a local or Slurm code study
    (protected files or an evaluator: its winner must be real) or one with held-out data (the
    search must not read it): refused where no sandbox can be made; else None (AIR_SANDBOX
    decides)."""
    if study.sandbox is not None:
        return study.sandbox
    code = study.code is not None and (bool(study.code.protected) or study.evaluate is not None)
    code = code or bool(study.holdout_data)
    return "on" if code and study.backend in (None, "local", "slurm") else None


def build_request(
    study: Study,
    state: StudyState,
    n: int,
    purpose: str = "propose",
    now: float | None = None,
    code: Any = None,
) -> ProposalRequest:
    """What the proposer sees: the whole history, the noise floor and the budgets left."""
    now = now or time.time()
    return ProposalRequest(
        study=study,
        # never the final re-evaluation's runs: they hold the held-out metric
        trials=tuple(t for t in state.ordered() if t.source != "final"),
        n=n,
        noise_floor=state.noise_floor,
        best_trial=state.best_trial,
        budget_left=budgets.budget_left(study, state, now),
        llm_usd_left=budgets.llm_usd_left(study, state),
        purpose=purpose,
        code=code,
        notes=tuple(state.steering.notes),
        pins=dict(state.steering.pins),
    )
