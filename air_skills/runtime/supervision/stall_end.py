"""What a stalled job becomes (on_stall: see stall.py's docstring); its stacks as an artifact."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from air_skills.runtime.results.outcomes import AttemptEnd, InfraFailure, Outcome, classify
from air_skills.runtime.supervision import stacks
from air_skills.runtime.supervision.stall_words import MARK, Stall


def outcome(stall: Stall, row: Any, spec: dict[str, Any]) -> Outcome:
    """The job's next state after the watch stopped it (see the module's docstring)."""
    on_stall = spec.get("on_stall")
    what = stall.what()
    where = f"stacks: {stall.stacks_path}" if stall.stacks_path else "no stacks could be saved"
    if on_stall == "retry" or (on_stall is None and stall.infra):
        end = AttemptEnd(
            row.job_id,
            signal="SIGTERM",
            infra=InfraFailure(what, "lost"),
            infra_retries=row.infra_retries,
            max_infra_retries=None if on_stall == "retry" else 1,
        )
        out = classify(end)
        why = "a rank waits in a collective" if stall.infra else "on_stall: retry"
        if out.action == "requeue":
            text = f"QUEUED: {what} ({why}: failure_kind infra, {MARK}; {where}); retried"
            return replace(out, message=text)
        return replace(
            out,
            message=f"FAILED (infra, {MARK}): {what} ({why}; {where}); stall retries spent."
            " Next: read the stacks file and `air logs "
            f"{row.job_id} --rank N`; check the network and GPUs (`air doctor --deep`), relaunch",
        )
    end = AttemptEnd(
        row.job_id,
        signal="SIGTERM",
        user_retries=row.user_retries,
        max_retries=spec.get("max_retries", 0),
    )
    out = classify(end)
    if out.action == "requeue":
        retry = f"retry {end.user_retries + 1} of {end.max_retries}"
        return replace(out, message=f"QUEUED: {what} ({MARK}; {where}); {retry}")
    return replace(
        out,
        message=f"FAILED: {what} ({MARK}; {where}). Next: fix the hang at that line; wrap a long"
        " quiet step in `air_skills.job.phase(name, expect_min)` or raise stall_timeout_min,"
        " then relaunch",
    )


def attach(home: Path, jdir: Path, row: Any, found: Stall, ready: Any = None) -> None:
    """The stacks file as an artifact of the job's MLflow run (best effort)."""
    if not row.run_id or not found.stacks_path:
        return
    if ready is not None:  # importing MLflow from two threads at once breaks it
        ready.wait(timeout=60)
    try:
        from air_skills.runtime.runs.job_run import job_uri
        from air_skills.tracking.writer import tracker_for

        text = stacks.read_small(Path(found.stacks_path), 1 << 20) or ""
        name = f"air/stacks-attempt-{row.attempts}.txt"
        tracker_for(home, job_uri(home, jdir)).log_text(row.run_id, text, name)
    except Exception:
        pass  # the stacks stay in the job's folder
