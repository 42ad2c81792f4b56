"""Jobs the agent already ran by hand, as a study's history (``prior_jobs``).

A prior job joins the study as a trial whose job is already launched: ``start_study`` journals
it (a proposal and a launch), and the loop judges it like any trial when its job has ended,
reading its objective from its run. One whose config is the study's base config is the
baseline (trial 0): it is not run again; one that differs from the base only in the seed
(``noise.seed_key``) is a repeat of the base (a noise sample), not run again either. A prior
job that has already ended is journaled as finished at once, with its status and value.
``suggest_trials`` adds them to the history it shows the proposer, with their objectives.
"""

from __future__ import annotations

from typing import Any

from air_skills.errors import InvalidInput
from autoresearch.journal.journal import Journal, StudyState, Trial, TrialStatus
from autoresearch.loop.outcomes import trial_outcome, usable

MAX_PRIOR_JOBS = 100


def _prior(study: Any, job_ids: list[str], client: Any) -> list[dict[str, Any]]:
    """Each prior job's id, run, config and diff against the base config (checked first)."""
    ids = list(dict.fromkeys(job_ids))
    if len(ids) > MAX_PRIOR_JOBS:
        raise InvalidInput(
            f"{len(ids)} prior_jobs given; at most {MAX_PRIOR_JOBS}",
            hint="pass the jobs that matter most (the baseline and the best)",
        )
    out = []
    for job_id in ids:
        info = client.get(job_id)  # NotFound names the id, with where ids come from
        config = client.store.row(job_id).spec_dict().get("config") or {}
        base = study.base_config
        diff = {k: v for k, v in config.items() if base.get(k, _UNSET) != v}
        # A key of the base config that the job lacks ran at its script default: not the base.
        missing = [k for k in base if k not in config]
        seed_key = study.noise.seed_key
        is_base = not diff and not missing
        out.append(
            {
                "info": info,
                "config": config,
                "diff": diff,
                "is_base": is_base,
                # the base but for its seed: a sample of the base's noise
                "is_repeat": not is_base and set(diff) | set(missing) <= {seed_key},
            }
        )
    return out


_UNSET = object()


def with_base_job(study: Any, client: Any) -> Any:
    """The study with its ``base_job``'s config under its own base_config (its keys win):
    the job's code (snapshot and patch) is what every trial runs (``Client.launch_on``); a
    code section's patches apply on top of it (code/code_base.py)."""
    if not study.base_job:
        return study
    info = client.get(study.base_job)  # NotFound names the id, with where ids come from
    config = client.store.row(info.job_id).spec_dict().get("config") or {}
    return study.model_copy(
        update={"base_job": info.job_id, "base_config": {**config, **study.base_config}}
    )


def journal_prior(folder: Any, study: Any, job_ids: list[str], client: Any) -> int:
    """Journal the prior jobs as launched trials of a new study; returns how many.

    The first one that ran the base config is trial 0, the baseline (so the loop does not
    run it again); the others follow. With no such job, trial 0 is left to the loop's own
    baseline run.
    """
    jobs = _prior(study, job_ids, client)
    base = next((j for j in jobs if j["is_base"]), None)
    base = base or next((j for j in jobs if j["is_repeat"]), None)
    journal = Journal(folder)
    number = 1
    for job in jobs:
        if job is base:
            n, source, why = 0, "baseline", "the base config, run by hand"
        elif job["is_repeat"]:
            n, source, why = number, "noise", "the base config, another seed, run by hand"
        else:
            n, source, why = number, "prior", "a prior job, run by hand"
        number += job is not base
        info = job["info"]
        journal.append(
            "proposal",
            trial=n,
            source=source,
            diff={} if source != "prior" else job["diff"],
            config=job["config"],
            rationale=f"{why}: {info.job_id}",
        )
        journal.append(
            "launched",
            trial=n,
            job_id=info.job_id,
            run_id=info.run_id,
            attempt=1,
            gpus=len(info.gpus),
        )
        if info.status.is_terminal():  # its status and value now, not "RUNNING, value null"
            trial = Trial(number=n, diff={}, config=job["config"], source=source)
            trial.job_id = info.job_id
            journal.append("finished", **_ended(trial, info, study, client))
    return len(jobs)


def _ended(t: Trial, info: Any, study: Any, client: Any) -> dict[str, Any]:
    """The ``finished`` event of a prior job that has ended, as the loop would write it."""
    from air_skills.errors import AirError

    latest: dict[str, float] = {}
    if info.run_id:
        try:
            latest = client.metrics(info.job_id).latest
        except AirError:
            latest = {}

    def tail() -> str:
        try:
            return str(client.logs(info.job_id, tail=50).text)
        except AirError:
            return ""

    objective = study.objective
    outcome = trial_outcome(
        t,
        info,
        metric=objective.metric,
        step_metric=None,
        latest=latest,
        curve=[],
        cancel_reason=None,
        log_tail=tail,
    )
    if outcome.logged is not None:  # never logged the objective: failed, and says what it did
        outcome.fields.setdefault("status", TrialStatus.FAILED.value)
    return outcome.fields


def with_prior(state: StudyState, study: Any, job_ids: list[str], client: Any) -> StudyState:
    """``state`` with the prior jobs added as finished trials (objective: the run's latest
    value of the study's metric), for a proposer's history; nothing is journaled."""
    metric = study.objective.metric
    jobs = _prior(study, job_ids, client)
    scores = client.scores([j["info"].job_id for j in jobs], metric, study.objective.direction)
    number = state.next_number
    for job in jobs:
        info = job["info"]
        value = (scores.get(info.job_id) or {}).get("latest")
        ok = str(info.status) == "SUCCEEDED" and usable(value)
        state.trials[number] = Trial(
            number=number,
            diff=job["diff"],
            config=job["config"],
            source="baseline" if job["is_base"] else "noise" if job["is_repeat"] else "prior",
            rationale=f"a prior job, run by hand: {info.job_id}",
            status=TrialStatus.SUCCEEDED if ok else TrialStatus.FAILED,
            job_id=info.job_id,
            run_id=info.run_id,
            value=value if ok else None,
            failure=None if ok else f"{info.status}: no {metric} to learn from",
            job_done=True,
        )
        number += 1
    return state
